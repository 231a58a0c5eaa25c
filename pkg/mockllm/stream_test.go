package mockllm_test

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

var update = flag.Bool("update", false, "rewrite the golden SSE transcripts in testdata")

func TestStreamShape(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, path, body string
		headers          []string
		chunks           int // content chunks expected
		usage            bool
		prompt           int
		text             bool // text_completion rather than chat
	}{
		{name: "chat default", path: "/v1/chat/completions", body: withFields(`"stream":true`), chunks: 8},
		{name: "chat usage", path: "/v1/chat/completions", body: withFields(`"stream":true,"stream_options":{"include_usage":true}`), chunks: 8, usage: true, prompt: chatPromptTokens},
		{name: "chat usage not asked", path: "/v1/chat/completions", body: withFields(`"stream":true,"stream_options":{"include_usage":false}`), chunks: 8},
		{name: "chat no_usage wins", path: "/v1/chat/completions", body: withFields(`"stream":true,"stream_options":{"include_usage":true}`), headers: []string{"X-Mock-No-Usage", "1"}, chunks: 8},
		{name: "chat 50 chunks", path: "/v1/chat/completions", body: withFields(`"stream":true`), headers: []string{"X-Mock-Chunks", "50"}, chunks: 50},
		{name: "chat zero chunks", path: "/v1/chat/completions", body: withFields(`"stream":true,"stream_options":{"include_usage":true},"mock":{"chunks":0}`), chunks: 0, usage: true, prompt: chatPromptTokens},
		{name: "completions usage", path: "/v1/completions", body: `{"model":"gpt-test","prompt":"a b c","stream":true,"stream_options":{"include_usage":true},"mock":{"chunks":3}}`, chunks: 3, usage: true, prompt: 3, text: true},
		{name: "completions zero chunks", path: "/v1/completions", body: `{"model":"gpt-test","prompt":"a","stream":true,"mock":{"chunks":0}}`, chunks: 0, text: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, tt.path, tt.body, tt.headers...)
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("content type %q", ct)
			}
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatalf("read stream: %v", err)
			}
			if n := len(events); n == 0 || events[n-1].data != "[DONE]" {
				t.Fatalf("stream does not end with [DONE]: %v", events)
			}
			chunks := decodeChunks(t, events)
			object, first := "chat.completion.chunk", 1 // role chunk first
			if tt.text {
				object, first = "text_completion", 0
			}
			var finishes, usageChunks, contents int
			var text strings.Builder
			for i, c := range chunks {
				if c.ID != chunks[0].ID || c.Object != object || c.Model != "gpt-test" || c.Created == 0 {
					t.Errorf("chunk %d: id %q object %q model %q created %d", i, c.ID, c.Object, c.Model, c.Created)
				}
				if len(c.Choices) == 0 {
					usageChunks++
					if i != len(chunks)-1 {
						t.Errorf("usage chunk %d is not the last chunk", i)
					}
					want := usage{tt.prompt, tt.chunks, tt.prompt + tt.chunks}
					if c.Usage == nil || *c.Usage != want {
						t.Errorf("usage %+v, want %+v", c.Usage, want)
					}
					continue
				}
				if c.Usage != nil {
					t.Errorf("chunk %d carries usage", i)
				}
				ch := c.Choices[0]
				if ch.FinishReason != nil {
					finishes++
					if *ch.FinishReason != "stop" {
						t.Errorf("finish_reason %q", *ch.FinishReason)
					}
				}
				if i == 0 && !tt.text && (ch.Delta.Role == nil || *ch.Delta.Role != "assistant" || ch.Delta.Content == nil || *ch.Delta.Content != "") {
					t.Errorf("first chunk is not the role chunk: %+v", ch.Delta)
				}
				piece := ch.Text
				if ch.Delta.Content != nil {
					piece = *ch.Delta.Content
				}
				if i >= first && piece != "" {
					contents++
					text.WriteString(piece)
				}
			}
			if finishes != 1 {
				t.Errorf("%d chunks carry a finish_reason, want exactly 1", finishes)
			}
			if want := b2i(tt.usage); usageChunks != want {
				t.Errorf("%d usage chunks, want %d", usageChunks, want)
			}
			if contents != tt.chunks {
				t.Errorf("%d content chunks, want %d", contents, tt.chunks)
			}
			if got := len(strings.Fields(text.String())); got != tt.chunks {
				t.Errorf("content %q has %d words, want %d", text.String(), got, tt.chunks)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestStreamPacing(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name    string
		headers []string
		// minSpan is the least time from the first to the last content
		// chunk: the server waits at least (chunks-1) * delay between them.
		minSpan time.Duration
		// headerLead is the least time between the header and the first
		// event (first_chunk_delay).
		headerLead time.Duration
	}{
		{"chunk delay", []string{"X-Mock-Chunks", "5", "X-Mock-Chunk-Delay-Ms", "40"}, 160 * time.Millisecond, 0},
		{"first chunk delay", []string{"X-Mock-Chunks", "2", "X-Mock-First-Chunk-Delay-Ms", "300"}, 0, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			begin := time.Now()
			resp := ts.post(t, "/v1/chat/completions", withFields(`"stream":true`), tt.headers...)
			header := time.Now()
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			content := events[1 : len(events)-1] // between the role chunk and [DONE]
			for i := 1; i < len(content); i++ {
				if content[i].at.Before(content[i-1].at) {
					t.Errorf("chunk %d arrived before chunk %d", i, i-1)
				}
			}
			if span := content[len(content)-1].at.Sub(content[0].at); span < tt.minSpan*3/4 {
				t.Errorf("content chunks spread over %v, want about %v", span, tt.minSpan)
			}
			if tt.headerLead > 0 {
				// The header is flushed before the first-chunk delay: the
				// first event comes well after it.
				if lead := events[0].at.Sub(header); lead < tt.headerLead/2 {
					t.Errorf("header came %v before the first event (request took %v), want about %v", lead, header.Sub(begin), tt.headerLead)
				}
			}
		})
	}
}

func TestStreamInterruptions(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name     string
		headers  []string
		mock     string
		contents int    // content chunks received
		tail     string // last event received
		readErr  bool   // the body ends with a read error
	}{
		{name: "cut after 2", headers: []string{"X-Mock-Cut-After", "2"}, contents: 2, readErr: true},
		{name: "cut after 0", mock: `"mock":{"cut_after":0}`, contents: 0, readErr: true},
		{name: "cut beyond the chunks", mock: `"mock":{"cut_after":99,"chunks":3}`, contents: 3, readErr: true},
		{name: "garbage", headers: []string{"X-Mock-Garbage", "true"}, contents: 0, tail: "RAW:", readErr: true},
		{name: "garbage after 3", mock: `"mock":{"garbage":true,"cut_after":3}`, contents: 3, tail: "RAW:", readErr: true},
		{name: "error event after 2", headers: []string{"X-Mock-Error-Event-After", "2"}, contents: 2, tail: `{"error":`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts.srv.ResetStats()
			resp := ts.post(t, "/v1/chat/completions", withFields(`"stream":true,"stream_options":{"include_usage":true}`+prefixComma(tt.mock)), tt.headers...)
			events, err := readEvents(resp.Body)
			if tt.readErr && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("read error %v, want unexpected EOF", err)
			}
			if !tt.readErr && err != nil {
				t.Errorf("read error %v, want a clean end", err)
			}
			var contents int
			for i, ev := range events {
				if ev.data == "[DONE]" {
					t.Fatalf("interrupted stream sent [DONE]")
				}
				if strings.HasPrefix(ev.data, "RAW:") || strings.HasPrefix(ev.data, `{"error"`) {
					if i != len(events)-1 {
						t.Errorf("event %d %q is not the last", i, ev.data)
					}
					continue
				}
				var c chunk
				if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
					t.Fatalf("event %q: %v", ev.data, err)
				}
				if len(c.Choices) == 0 || c.Choices[0].FinishReason != nil {
					t.Errorf("interrupted stream sent a usage or finish chunk: %s", ev.data)
				}
				if i > 0 {
					contents++
				}
			}
			if contents != tt.contents {
				t.Errorf("%d content chunks, want %d", contents, tt.contents)
			}
			if tt.tail != "" && (len(events) == 0 || !strings.HasPrefix(events[len(events)-1].data, tt.tail)) {
				t.Errorf("last event %v, want prefix %q", events[len(events)-1:], tt.tail)
			}
			st := waitStats(t, ts.srv, func(s mockllm.Stats) bool { return s.CompletionTokens == int64(tt.contents) })
			if st.FailuresInjected != 1 || st.StreamsCompleted != 0 || st.StreamsCancelled != 0 || st.StreamsStarted != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func prefixComma(s string) string {
	if s == "" {
		return ""
	}
	return "," + s
}

func TestToolCallStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, choice, want string
		words              int
	}{
		{"required", `"required"`, "get_weather", 4},
		{"named", `{"type":"function","function":{"name":"get_time"}}`, "get_time", 1},
		{"no words", `"required"`, "get_weather", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := withFields(`"stream":true,"stream_options":{"include_usage":true},` + tools + `,"tool_choice":` + tt.choice)
			resp := ts.post(t, "/v1/chat/completions", body, "X-Mock-Chunks", strconv.Itoa(tt.words))
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if events[len(events)-1].data != "[DONE]" {
				t.Fatalf("no [DONE]")
			}
			var args strings.Builder
			var id, name string
			var finishes int
			for i, c := range decodeChunks(t, events) {
				if len(c.Choices) == 0 {
					if c.Usage == nil || c.Usage.CompletionTokens != tt.words {
						t.Errorf("usage %+v", c.Usage)
					}
					continue
				}
				ch := c.Choices[0]
				if ch.FinishReason != nil {
					finishes++
					if *ch.FinishReason != "tool_calls" {
						t.Errorf("finish_reason %q", *ch.FinishReason)
					}
				}
				for _, tc := range ch.Delta.ToolCalls {
					if tc.Index != 0 {
						t.Errorf("tool call index %d", tc.Index)
					}
					if tc.ID != "" {
						if i != 0 || id != "" {
							t.Errorf("call id in chunk %d", i)
						}
						id, name = tc.ID, tc.Function.Name
						if tc.Type != "function" {
							t.Errorf("type %q", tc.Type)
						}
					}
					args.WriteString(tc.Function.Arguments)
				}
			}
			if finishes != 1 || !strings.HasPrefix(id, "call_") || name != tt.want {
				t.Errorf("finishes %d id %q name %q", finishes, id, name)
			}
			var v map[string]string
			if err := json.Unmarshal([]byte(args.String()), &v); err != nil {
				t.Fatalf("arguments %q: %v", args.String(), err)
			}
			if got := len(strings.Fields(v["input"])); got != tt.words {
				t.Errorf("arguments %q have %d words, want %d", args.String(), got, tt.words)
			}
		})
	}
}

// TestStreamCancelled has the client read 2 chunks of a 50-chunk stream
// paced 20 ms apart, then close the connection.
func TestStreamCancelled(t *testing.T) {
	ts := start(t, mockllm.Config{})
	conn, br := rawStream(t, ts.addr, withFields(`"stream":true`), "X-Mock-Chunks", "50", "X-Mock-Chunk-Delay-Ms", "20")
	seen := 0
	for seen < 3 { // the role chunk and 2 content chunks
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if strings.HasPrefix(line, "data: ") {
			seen++
		}
	}
	conn.Close()
	st := waitStats(t, ts.srv, func(s mockllm.Stats) bool { return s.StreamsCancelled == 1 })
	if st.StreamsCompleted != 0 || st.StreamsStarted != 1 || st.FailuresInjected != 0 {
		t.Errorf("stats %+v", st)
	}
	if st.CompletionTokens < 2 || st.CompletionTokens >= 50 {
		t.Errorf("completion_tokens %d, want the chunks written before the client left", st.CompletionTokens)
	}
}

// TestShutdownFinishesStreams checks that Shutdown skips pending delays, so
// a slow stream ends at once and completely.
func TestShutdownFinishesStreams(t *testing.T) {
	ts := start(t, mockllm.Config{})
	resp := ts.post(t, "/v1/chat/completions", withFields(`"stream":true`), "X-Mock-Chunks", "100", "X-Mock-Chunk-Delay-Ms", "200")
	got := make(chan []event, 1)
	go func() {
		events, _ := readEvents(resp.Body)
		got <- events
	}()
	time.Sleep(50 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- ts.srv.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(10 * time.Second): // the stream alone would take 20 s
		t.Fatal("shutdown waited for the stream's delays")
	}
	events := <-got
	if len(events) != 1+100+1 || events[len(events)-1].data != "[DONE]" {
		t.Errorf("got %d events, want the whole stream", len(events))
	}
}

// idOrTime matches the parts of a stream that change on every run.
var idOrTime = regexp.MustCompile(`"(chatcmpl-|cmpl-|call_)[0-9a-f]{16}(_[0-9]+)?"|"created":[0-9]+`)

func TestGoldenTranscripts(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, path, body string
	}{
		{"chat_stream_usage", "/v1/chat/completions", withFields(`"stream":true,"stream_options":{"include_usage":true},"mock":{"chunks":3}`)},
		{"chat_stream_tool_call", "/v1/chat/completions", withFields(`"stream":true,` + tools + `,"tool_choice":"required","mock":{"chunks":2}`)},
		{"completions_stream", "/v1/completions", `{"model":"gpt-test","prompt":"hi","stream":true,"mock":{"chunks":2}}`},
		{"chat_stream_parallel_tool_calls", "/v1/chat/completions", withFields(`"stream":true,` + schemaTools + `,"tool_choice":"required","mock":{"chunks":5,"tool_calls":2}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, tt.path, tt.body)
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			got := idOrTime.ReplaceAllStringFunc(string(raw), func(m string) string {
				if strings.HasPrefix(m, `"created"`) {
					return `"created":0`
				}
				id := m[:strings.IndexAny(m, "-_")+1] + "ID"
				if i := strings.LastIndexByte(m, '_'); i > len(id)-2 {
					id += m[i : len(m)-1] // the call number
				}
				return id + `"`
			})
			path := filepath.Join("testdata", tt.name+".sse")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run with -update to create): %v", err)
			}
			if got != string(want) {
				t.Errorf("transcript differs from %s:\n got: %s\nwant: %s", path, got, want)
			}
		})
	}
}
