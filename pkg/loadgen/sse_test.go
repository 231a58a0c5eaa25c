package loadgen

import (
	"fmt"
	"strings"
	"testing"
)

// sseChunk returns one chat.completion.chunk event. content "" with role
// set is the opening chunk; finish "" means no finish_reason.
func sseChunk(id, role, content, finish string) string {
	delta := `{"content":` + quote(content) + `}`
	if role != "" {
		delta = `{"role":"` + role + `","content":""}`
	}
	fr := "null"
	if finish != "" {
		fr = quote(finish)
	}
	return `data: {"id":"` + id + `","object":"chat.completion.chunk","created":1700000000,"model":"mock-gpt",` +
		`"choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + fr + `}]}` + "\n\n"
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// usageChunk is the final chunk sent when the request sets
// stream_options.include_usage.
const usageChunk = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"mock-gpt","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}` + "\n\n"

// goodStream is a well-formed stream of n content chunks, like the mock's,
// without a usage chunk.
func goodStream(n int) string {
	var sb strings.Builder
	sb.WriteString(sseChunk("chatcmpl-1", "assistant", "", ""))
	for i := range n {
		finish := ""
		if i == n-1 {
			finish = "stop"
		}
		sb.WriteString(sseChunk("chatcmpl-1", "", fmt.Sprintf("word%d ", i), finish))
	}
	sb.WriteString("data: [DONE]\n\n")
	return sb.String()
}

// sseCase is a transcript with the outcome expected for 3 chunks, and
// whether the request asked for a usage chunk.
type sseCase struct {
	name   string
	stream string
	want   kind
	usage  bool
}

// sseCases are the checker's cases; the run tests serve them too.
func sseCases() []sseCase {
	good := goodStream(3)
	withUsage := strings.Replace(good, "data: [DONE]", usageChunk+"data: [DONE]", 1)
	return []sseCase{
		{"ok", good, kindOK, false},
		{"ok with usage", withUsage, kindOK, true},
		{"usage asked but missing", good, kindUsage, true},
		{"usage not asked but sent", withUsage, kindUnwantedUsage, false},
		{"two usage chunks", strings.Replace(withUsage, usageChunk, usageChunk+usageChunk, 1), kindUsage, true},
		{"ok crlf", strings.ReplaceAll(good, "\n", "\r\n"), kindOK, false},
		{"ok comments and event fields", ": keep-alive\n\nevent: message\nid: 7\nretry: 100\n" + good, kindOK, false},
		{"ok done without final blank line", strings.TrimSuffix(good, "\n"), kindOK, false},
		{"ok data split over two lines", "data: {\"id\":\"chatcmpl-1\",\"choices\":\ndata: []}\n\n" + good, kindOK, false},
		{"bad json", sseChunk("chatcmpl-1", "assistant", "", "") + "data: {\"id\":\"chatcmpl-1\",\n\n" + good, kindBadJSON, false},
		{"garbage line", sseChunk("chatcmpl-1", "assistant", "", "") + "%%% garbage %%%\n" + good, kindBadSSE, false},
		{"error event", sseChunk("chatcmpl-1", "", "hi", "") + `data: {"error":{"message":"boom","type":"server_error","param":null,"code":null}}` + "\n\n", kindErrorEvent, false},
		{"too few chunks", goodStream(2), kindChunkCount, false},
		{"too many chunks", goodStream(4), kindChunkCount, false},
		{"no done", strings.TrimSuffix(good, "data: [DONE]\n\n"), kindNoDone, false},
		{"empty body", "", kindNoDone, false},
		{"data after done", good + sseChunk("chatcmpl-1", "", "late", ""), kindDataAfterDone, false},
		{"two finish reasons", sseChunk("chatcmpl-1", "", "a", "stop") + good, kindMultipleFinish, false},
		{"no finish reason", strings.Replace(good, `"finish_reason":"stop"`, `"finish_reason":null`, 1), kindNoFinish, false},
		{"id changes", strings.Replace(good, `"id":"chatcmpl-1"`, `"id":"chatcmpl-2"`, 2), kindIDMismatch, false},
		{"id missing", strings.Replace(good, `"id":"chatcmpl-1",`, ``, 1), kindNoID, false},
	}
}

func TestSSECheck(t *testing.T) {
	for _, tc := range sseCases() {
		t.Run(tc.name, func(t *testing.T) {
			// Every split of the stream into two reads, and byte by byte,
			// must give the same answer as one read.
			splits := [][]string{{tc.stream}, bytesOf(tc.stream)}
			for i := 1; i < len(tc.stream); i += 7 {
				splits = append(splits, []string{tc.stream[:i], tc.stream[i:]})
			}
			var c sseCheck
			for _, parts := range splits {
				c.reset(3, tc.usage)
				for _, p := range parts {
					c.feed([]byte(p))
				}
				if got := c.end(); got != tc.want {
					t.Fatalf("split %d parts: got %s, want %s", len(parts), got, tc.want)
				}
			}
		})
	}
}

func TestSSECheckAnyChunks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		want   kind
	}{
		{"some chunks", goodStream(5), kindOK},
		{"no content", goodStream(0), kindChunkCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c sseCheck
			c.reset(0, false)
			c.feed([]byte(tc.stream))
			if got := c.end(); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func bytesOf(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}

// FuzzSSECheck checks that the outcome does not depend on how the stream
// is cut into reads, and that nothing panics.
func FuzzSSECheck(f *testing.F) {
	for _, tc := range sseCases() {
		f.Add(tc.stream, uint16(len(tc.stream)/2), tc.usage)
	}
	f.Fuzz(func(t *testing.T, stream string, at uint16, usage bool) {
		cut := int(at) % (len(stream) + 1)
		var whole, split sseCheck
		whole.reset(3, usage)
		whole.feed([]byte(stream))
		split.reset(3, usage)
		split.feed([]byte(stream[:cut]))
		split.feed([]byte(stream[cut:]))
		if a, b := whole.end(), split.end(); a != b {
			t.Fatalf("whole %s, split at %d %s", a, cut, b)
		}
	})
}

// BenchmarkSSECheck measures validation per chunk of a 50-chunk stream fed
// in one read per event, as it arrives from a paced upstream. Expect 0
// allocs/op.
func BenchmarkSSECheck(b *testing.B) {
	const chunks = 50
	stream := strings.Replace(goodStream(chunks), "data: [DONE]", usageChunk+"data: [DONE]", 1)
	var events [][]byte
	for ev := range strings.SplitAfterSeq(stream, "\n\n") {
		if ev != "" {
			events = append(events, []byte(ev))
		}
	}
	var c sseCheck
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)) / int64(len(events)))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%len(events) == 0 {
			c.reset(chunks, true)
		}
		c.feed(events[i%len(events)])
	}
	if c.err != kindOK {
		b.Fatalf("stream invalid: %s", c.err)
	}
}
