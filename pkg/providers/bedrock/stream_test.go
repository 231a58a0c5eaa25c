package bedrock

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

// transcript reads a testdata/stream/*.events file into an event-stream
// body and whether the client asked for usage.
func transcript(t testing.TB, path string) (body []byte, includeUsage bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case line == "include_usage":
			includeUsage = true
		default:
			kind, rest, _ := strings.Cut(line, " ")
			typ, payload, _ := strings.Cut(rest, " ")
			switch kind {
			case "event":
				body = append(body, eventFrame(t, typ, payload)...)
			case "exception":
				body = append(body, frame(t, payload, ":exception-type", typ, ":content-type", "application/json", ":message-type", "exception")...)
			default:
				t.Fatalf("%s: bad line %q", path, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return body, includeUsage
}

// result is what relaying one stream produced.
type result struct {
	out   []byte
	state providers.State
	err   error // the Event error, or the Fill error that ended the stream
	usage providers.Usage
	done  bool // Complete()
}

// relay reads src through the stream's framer and translates every frame,
// as the gateway does, until Done, Failed or the end of src.
func relay(s providers.Stream, src io.Reader) result {
	fr := s.Framer(src)
	var r result
	r.state = providers.More
	for r.state == providers.More {
		ev, ok := fr.Next()
		if !ok {
			if err := fr.Fill(); err != nil {
				r.err = err
				break
			}
			continue
		}
		r.out, r.state, r.err = s.Event(r.out, ev)
	}
	r.usage, r.done = s.Usage(), s.Complete()
	return r
}

// TestStreamGolden relays each upstream transcript in
// testdata/stream/*.events, a few bytes per read, and compares the client's
// SSE output with its .sse golden.
func TestStreamGolden(t *testing.T) {
	p := testProvider(t, "")
	files, err := filepath.Glob("testdata/stream/*.events")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, in := range files {
		name := strings.TrimSuffix(filepath.Base(in), ".events")
		t.Run(name, func(t *testing.T) {
			body, includeUsage := transcript(t, in)
			c := chatCall(`{"stream":true}`)
			c.IncludeUsage = includeUsage
			s := p.Stream(c)
			defer s.Close()
			r := relay(s, &slowReader{b: body, n: 7})
			checkSSE(t, r.out)
			out := append([]byte(nil), r.out...)
			out = fmt.Appendf(out, ": end state=%d complete=%v usage=%+v err=%v\n", r.state, r.done, r.usage, r.err)
			golden(t, strings.TrimSuffix(in, ".events")+".sse", out)
		})
	}
}

// TestStreamWireContract checks what OpenAI clients rely on for every
// transcript that completes: one id, role first, exactly one finish
// reason, the usage chunk only when asked and last before [DONE].
func TestStreamWireContract(t *testing.T) {
	p := testProvider(t, "")
	for _, name := range []string{"text_usage", "tool_calls", "reasoning_max_tokens"} {
		for _, ask := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/include_usage=%v", name, ask), func(t *testing.T) {
				body, _ := transcript(t, "testdata/stream/"+name+".events")
				c := chatCall(`{"stream":true}`)
				c.IncludeUsage = ask
				s := p.Stream(c)
				defer s.Close()
				r := relay(s, bytes.NewReader(body))
				if r.state != providers.Done || r.err != nil || !r.done {
					t.Fatalf("state %d err %v complete %v", r.state, r.err, r.done)
				}
				if !r.usage.Reported {
					t.Error("usage not reported")
				}
				checkContract(t, checkSSE(t, r.out), ask)
			})
		}
	}
}

func checkContract(t *testing.T, data []string, usageAsked bool) {
	t.Helper()
	if n := len(data); n < 3 || data[n-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", data)
	}
	chunks := data[:len(data)-1]
	id := gjson.Get(chunks[0], "id").Str
	if !strings.HasPrefix(id, "chatcmpl-") {
		t.Errorf("id %q", id)
	}
	if d := gjson.Get(chunks[0], "choices.0.delta"); d.Get("role").Str != "assistant" || d.Get("content").Raw != `""` {
		t.Errorf("first chunk %s", chunks[0])
	}
	finishes, usageChunks := 0, 0
	for i, ch := range chunks {
		if gjson.Get(ch, "id").Str != id || gjson.Get(ch, "object").Str != "chat.completion.chunk" || gjson.Get(ch, "created").Int() != fixedNow.Unix() {
			t.Errorf("chunk %d header: %s", i, ch)
		}
		if fr := gjson.Get(ch, "choices.0.finish_reason"); fr.Type == gjson.String {
			finishes++
		}
		if gjson.Get(ch, "usage").Exists() {
			usageChunks++
			if i != len(chunks)-1 || gjson.Get(ch, "choices").Raw != "[]" {
				t.Errorf("usage chunk %d is not the last one with empty choices: %s", i, ch)
			}
			for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details.cached_tokens", "completion_tokens_details.reasoning_tokens"} {
				if !gjson.Get(ch, "usage."+k).Exists() {
					t.Errorf("usage lacks %s", k)
				}
			}
		}
	}
	if finishes != 1 {
		t.Errorf("%d chunks carry a finish reason", finishes)
	}
	if want := map[bool]int{false: 0, true: 1}[usageAsked]; usageChunks != want {
		t.Errorf("%d usage chunks, want %d", usageChunks, want)
	}
}

func TestStreamEventFailures(t *testing.T) {
	p := testProvider(t, "")
	good := eventFrame(t, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"x"}}`)
	truncated := append([]byte(nil), good[:len(good)-1]...)
	binary.BigEndian.PutUint32(truncated, uint32(len(truncated)))
	tests := []struct {
		name    string
		ev      []byte
		wantMsg string // UpstreamError message; "" for ErrMalformed
	}{
		{"short", []byte{0, 0, 0, 1}, ""},
		{"length mismatch", truncated, ""},
		{"payload not json", eventFrame(t, "contentBlockDelta", `{"delta":`), ""},
		{"exception", frame(t, `{"message":"Model stream errored"}`, ":message-type", "exception", ":exception-type", "modelStreamErrorException"),
			"modelStreamErrorException: Model stream errored"},
		{"exception without payload", frame(t, ``, ":message-type", "exception", ":exception-type", "internalServerException"), "internalServerException"},
		{"error message", frame(t, ``, ":message-type", "error", ":error-code", "InternalFailure", ":error-message", "boom"), "InternalFailure: boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := p.Stream(chatCall(`{}`))
			defer s.Close()
			out, st, err := s.Event(nil, tc.ev)
			if st != providers.Failed || len(out) != 0 {
				t.Fatalf("state %d out %q", st, out)
			}
			var ue *providers.UpstreamError
			switch {
			case tc.wantMsg == "" && !errors.Is(err, providers.ErrMalformed):
				t.Errorf("err = %v, want ErrMalformed", err)
			case tc.wantMsg != "" && (!errors.As(err, &ue) || ue.Message != tc.wantMsg):
				t.Errorf("err = %v, want UpstreamError %q", err, tc.wantMsg)
			}
		})
	}
}

func TestStreamIgnoresUnknown(t *testing.T) {
	p := testProvider(t, "")
	s := p.Stream(chatCall(`{}`))
	defer s.Close()
	for _, ev := range [][]byte{
		eventFrame(t, "somethingNew", `{"x":1}`),
		frame(t, `{}`, ":message-type", "heartbeat"),
		eventFrame(t, "contentBlockStop", `{"contentBlockIndex":0}`),
	} {
		out, st, err := s.Event(nil, ev)
		if st != providers.More || err != nil || len(out) != 0 {
			t.Errorf("state %d err %v out %q", st, err, out)
		}
	}
}

// TestStreamMetadataBeforeStop ends the stream whichever of messageStop and
// metadata comes last.
func TestStreamMetadataBeforeStop(t *testing.T) {
	p := testProvider(t, "")
	c := chatCall(`{}`)
	c.IncludeUsage = true
	s := p.Stream(c)
	defer s.Close()
	body := append(eventFrame(t, "metadata", `{"usage":{"inputTokens":1,"outputTokens":2}}`), eventFrame(t, "messageStop", `{"stopReason":"stop_sequence"}`)...)
	r := relay(s, bytes.NewReader(body))
	if r.state != providers.Done || !r.done || r.usage.Completion != 2 {
		t.Fatalf("%+v", r)
	}
	checkContract(t, checkSSE(t, r.out), true)
}

func TestFramer(t *testing.T) {
	f1 := eventFrame(t, "messageStart", `{"role":"assistant"}`)
	f2 := eventFrame(t, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"`+strings.Repeat("x", 20000)+`"}}`)
	badCRC := append([]byte(nil), f1...)
	badCRC[len(badCRC)-6] ^= 0x01 // a payload byte
	badPrelude := append([]byte(nil), f1...)
	badPrelude[9] ^= 0x01 // the prelude CRC
	badHeader := append([]byte(nil), f1...)
	badHeader[12+1+len(":event-type")] = 42 // an unknown header value type
	reCRC(badHeader)
	huge := make([]byte, 12)
	binary.BigEndian.PutUint32(huge, maxFrameSize+1)
	binary.BigEndian.PutUint32(huge[8:], crc32.ChecksumIEEE(huge[:8]))

	tests := []struct {
		name    string
		body    []byte
		frames  int
		wantErr error // what ends the stream after the frames
	}{
		{"frames split across reads", append(append([]byte(nil), f1...), f2...), 2, io.EOF},
		{"cut mid-frame", append(append([]byte(nil), f1...), f2[:100]...), 1, io.EOF},
		{"bad message crc", append(append([]byte(nil), f1...), badCRC...), 1, providers.ErrMalformed},
		{"bad prelude crc", append(badPrelude, f2...), 0, providers.ErrMalformed},
		{"bad header type", badHeader, 0, providers.ErrMalformed},
		{"garbage", []byte("\x00\xff<<not an event stream>>\r\n"), 0, providers.ErrMalformed},
		{"length over the limit", huge, 0, providers.ErrMalformed},
	}
	for _, tc := range tests {
		for _, n := range []int{1, 13, 1 << 20} {
			t.Run(fmt.Sprintf("%s/read=%d", tc.name, n), func(t *testing.T) {
				var fr framer
				fr.reset(&slowReader{b: tc.body, n: n})
				frames := 0
				var err error
				for err == nil {
					if ev, ok := fr.Next(); ok {
						if _, derr := eventstream.NewDecoder().Decode(bytes.NewReader(ev), nil); derr != nil {
							t.Fatalf("framer returned a bad frame: %v", derr)
						}
						frames++
						continue
					}
					err = fr.Fill()
				}
				if frames != tc.frames || !errors.Is(err, tc.wantErr) {
					t.Errorf("%d frames, end %v; want %d frames, end %v", frames, err, tc.frames, tc.wantErr)
				}
				if errors.Is(tc.wantErr, io.EOF) && tc.frames == 1 && len(tc.body) > len(f1) && len(fr.Buffered()) != 100 {
					t.Errorf("buffered %d bytes of the cut frame", len(fr.Buffered()))
				}
			})
		}
	}
}

// reCRC recomputes the prelude and message CRCs of a frame.
func reCRC(f []byte) {
	binary.BigEndian.PutUint32(f[8:], crc32.ChecksumIEEE(f[:8]))
	binary.BigEndian.PutUint32(f[len(f)-4:], crc32.ChecksumIEEE(f[:len(f)-4]))
}

// FuzzFramer feeds arbitrary bytes to the framer: it must never panic, and
// every frame it returns must pass the AWS decoder's checks.
func FuzzFramer(f *testing.F) {
	f1 := eventFrame(f, "messageStart", `{"role":"assistant"}`)
	f2 := eventFrame(f, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"hi"}}`)
	f.Add(append(append([]byte(nil), f1...), f2...), uint8(5))
	f.Add(f1[:20], uint8(1))
	f.Add([]byte("\x00\x00\x00\x10\x00\x00\x00\x00garbage!"), uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, n uint8) {
		var fr framer
		fr.reset(&slowReader{b: body, n: int(n%64) + 1})
		for range 10000 {
			if ev, ok := fr.Next(); ok {
				if _, err := eventstream.NewDecoder().Decode(bytes.NewReader(ev), nil); err != nil {
					t.Fatalf("framer returned a bad frame: %v", err)
				}
				if crc32.ChecksumIEEE(ev[:len(ev)-4]) != binary.BigEndian.Uint32(ev[len(ev)-4:]) {
					t.Fatal("framer returned a frame with a bad message CRC")
				}
				continue
			}
			if fr.Fill() != nil {
				return
			}
		}
		t.Fatal("framer did not end")
	})
}

// FuzzStreamEvent feeds arbitrary frames to the translator: it must never
// panic, and everything it writes must be SSE events of valid JSON.
func FuzzStreamEvent(f *testing.F) {
	for _, name := range []string{"text_usage", "tool_calls", "throttled"} {
		body, _ := transcript(f, "testdata/stream/"+name+".events")
		for len(body) >= 4 {
			n := int(binary.BigEndian.Uint32(body))
			f.Add(body[:n], true)
			body = body[n:]
		}
	}
	p := testProvider(f, "")
	f.Fuzz(func(t *testing.T, ev []byte, includeUsage bool) {
		c := chatCall(`{}`)
		c.IncludeUsage = includeUsage
		s := p.Stream(c)
		defer s.Close()
		start := eventFrame(t, "contentBlockStart", `{"contentBlockIndex":1,"start":{"toolUse":{"name":"f","toolUseId":"t"}}}`)
		var out []byte
		for _, e := range [][]byte{start, ev, ev, eventFrame(t, "messageStop", `{"stopReason":"end_turn"}`), ev} {
			out, _, _ = s.Event(out, e)
		}
		checkSSE(t, out)
		if !utf8.Valid(out) {
			t.Fatalf("output is not UTF-8: %q", out)
		}
	})
}
