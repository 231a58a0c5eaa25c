package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
)

// runStream feeds an SSE transcript through s event by event, as the
// gateway does, and returns the output and the last state.
func runStream(t testing.TB, s providers.Stream, transcript []byte) ([]byte, providers.State, error) {
	t.Helper()
	r := sse.NewReader(bytes.NewReader(transcript), 512, 1<<20)
	var out []byte
	for {
		ev, ok := r.Next()
		if !ok {
			if err := r.Fill(); err != nil {
				if errors.Is(err, io.EOF) {
					return out, providers.More, nil
				}
				t.Fatal(err)
			}
			continue
		}
		var st providers.State
		var err error
		out, st, err = s.Event(out, ev)
		if st != providers.More {
			return out, st, err
		}
	}
}

// openAIStream is what a client reads from a chat.completion.chunk stream.
type openAIStream struct {
	content, reasoning string
	finish             string
	calls              []struct{ id, name, args string }
	usage              *providers.Usage
	done               bool
}

// checkOpenAIStream checks the wire details clients rely on and returns
// what the stream said.
func checkOpenAIStream(t *testing.T, out []byte) openAIStream {
	t.Helper()
	var res openAIStream
	events := strings.Split(string(out), "\n\n")
	if events[len(events)-1] != "" {
		t.Fatalf("output does not end with a blank line: %q", out)
	}
	events = events[:len(events)-1]
	var id string
	finishes := 0
	for i, ev := range events {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("event %d is not one data line: %q", i, ev)
		}
		if data == "[DONE]" {
			if i != len(events)-1 {
				t.Errorf("[DONE] is not last")
			}
			res.done = true
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			Model   string `json:"model"`
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role      *string `json:"role"`
					Content   *string `json:"content"`
					Reasoning string  `json:"reasoning_content"`
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				Prompt     uint64 `json:"prompt_tokens"`
				Completion uint64 `json:"completion_tokens"`
				Total      uint64 `json:"total_tokens"`
				Details    struct {
					Cached uint64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, data)
		}
		if id == "" {
			id = c.ID
		}
		if c.ID != id || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion.chunk" || c.Created != fixedNow().Unix() || c.Model == "" {
			t.Errorf("chunk %d: id %q object %q created %d model %q", i, c.ID, c.Object, c.Created, c.Model)
		}
		if len(c.Choices) == 0 {
			if c.Usage == nil || c.Usage.Total != c.Usage.Prompt+c.Usage.Completion {
				t.Errorf("chunk %d without choices is not a usage chunk: %s", i, data)
			} else {
				res.usage = &providers.Usage{Prompt: c.Usage.Prompt, Completion: c.Usage.Completion, Cached: c.Usage.Details.Cached, Reported: true}
			}
			continue
		}
		ch := c.Choices[0]
		if i == 0 && (ch.Delta.Role == nil || *ch.Delta.Role != "assistant" || ch.Delta.Content == nil || *ch.Delta.Content != "") {
			t.Errorf("first chunk is not the role chunk: %s", data)
		}
		if i > 0 && ch.Delta.Role != nil {
			t.Errorf("chunk %d repeats the role", i)
		}
		if ch.Delta.Content != nil {
			res.content += *ch.Delta.Content
		}
		res.reasoning += ch.Delta.Reasoning
		for _, tc := range ch.Delta.ToolCalls {
			if tc.ID != "" {
				if tc.Index != len(res.calls) || tc.Type != "function" || tc.Function.Name == "" {
					t.Errorf("tool call start %d: %s", tc.Index, data)
				}
				res.calls = append(res.calls, struct{ id, name, args string }{tc.ID, tc.Function.Name, ""})
			}
			if tc.Index >= len(res.calls) {
				t.Fatalf("arguments for unknown tool call %d", tc.Index)
			}
			res.calls[tc.Index].args += tc.Function.Arguments
		}
		if ch.FinishReason != nil {
			finishes++
			res.finish = *ch.FinishReason
		}
	}
	if finishes != 1 {
		t.Errorf("%d chunks carry a finish_reason, want 1", finishes)
	}
	return res
}

func TestStreamGolden(t *testing.T) {
	p := testProvider(t, "")
	tests := []struct {
		name         string
		includeUsage bool
		usage        providers.Usage
		content      string
		reasoning    string
		finish       string
		calls        int
	}{
		{"text", true, providers.Usage{Prompt: 35, Completion: 15, Cached: 10, Reported: true}, "Hello, \"world\"\n 🎉 é", "", "stop", 0},
		{"tool_use", true, providers.Usage{Prompt: 472, Completion: 89, CacheWrite: 450, Reported: true}, "Checking both.", "", "tool_calls", 2},
		{"thinking", false, providers.Usage{Prompt: 12, Completion: 120, Cached: 3, Reported: true}, "4", "Step 1: 2+2", "length", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := p.Stream(&providers.Call{Model: "claude", IncludeUsage: tt.includeUsage})
			defer s.Close()
			out, st, err := runStream(t, s, readFile(t, filepath.Join("testdata", "stream", tt.name+".sse")))
			if err != nil || st != providers.Done || !s.Complete() {
				t.Fatalf("state %v err %v complete %v", st, err, s.Complete())
			}
			if u := s.Usage(); u != tt.usage {
				t.Errorf("usage %+v, want %+v", u, tt.usage)
			}
			golden(t, filepath.Join("testdata", "stream", tt.name+".golden.sse"), out)
			res := checkOpenAIStream(t, out)
			if !res.done || res.content != tt.content || res.reasoning != tt.reasoning || res.finish != tt.finish || len(res.calls) != tt.calls {
				t.Errorf("stream said %+v", res)
			}
			chunk := tt.usage
			chunk.CacheWrite = 0 // the OpenAI usage chunk has no cache-write count; the gateway bills it from Usage
			if tt.includeUsage != (res.usage != nil) || res.usage != nil && *res.usage != chunk {
				t.Errorf("usage chunk %+v, want %v", res.usage, tt.includeUsage)
			}
			for _, c := range res.calls {
				if !json.Valid([]byte(c.args)) {
					t.Errorf("tool call %s arguments %q", c.id, c.args)
				}
			}
		})
	}
}

func TestStreamFailures(t *testing.T) {
	p := testProvider(t, "")
	const start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":3}}}\n\n"
	tests := []struct {
		name, transcript string
		upstream         bool // an UpstreamError rather than ErrMalformed
		message          string
	}{
		{"error event", start + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", true, "overloaded_error: Overloaded"},
		{"error first", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n", true, "api_error: boom"},
		{"not JSON", start + "event: content_block_delta\ndata: {\"type\":\n\n", false, ""},
		{"deep nesting", start + "data: " + strings.Repeat("[", 200) + "\n\n", false, ""},
		{"delta before start", "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := p.Stream(&providers.Call{Model: "claude"})
			defer s.Close()
			_, st, err := runStream(t, s, []byte(tt.transcript))
			if st != providers.Failed {
				t.Fatalf("state %v, want Failed", st)
			}
			var ue *providers.UpstreamError
			if tt.upstream {
				if !errors.As(err, &ue) || ue.Message != tt.message {
					t.Errorf("err %v, want upstream error %q", err, tt.message)
				}
			} else if !errors.Is(err, providers.ErrMalformed) {
				t.Errorf("err %v, want ErrMalformed", err)
			}
			if s.Complete() {
				t.Errorf("a failed stream is complete")
			}
		})
	}
	t.Run("cut before message_stop", func(t *testing.T) {
		s := p.Stream(&providers.Call{Model: "claude"})
		defer s.Close()
		out, st, err := runStream(t, s, []byte(start+"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"))
		if st != providers.More || err != nil || s.Complete() || len(out) == 0 {
			t.Errorf("state %v err %v complete %v out %q", st, err, s.Complete(), out)
		}
		if u := s.Usage(); u.Prompt != 3 || !u.Reported {
			t.Errorf("usage %+v", u)
		}
	})
}

// FuzzStream feeds arbitrary events after a message_start: the decoder
// never panics and every event it writes is a data line of valid JSON (or
// [DONE]).
func FuzzStream(f *testing.F) {
	for _, name := range []string{"text", "tool_use", "thinking"} {
		b, err := readFileErr(filepath.Join("testdata", "stream", name+".sse"))
		if err != nil {
			f.Fatal(err)
		}
		for _, ev := range bytes.SplitAfter(b, []byte("\n\n")) {
			f.Add(ev)
		}
	}
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\\u0000\"}}\n\n"))
	p, err := New(Options{Name: "fuzz", Now: fixedNow})
	if err != nil {
		f.Fatal(err)
	}
	start := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\"}}\n\n")
	f.Fuzz(func(t *testing.T, ev []byte) {
		s := p.Stream(&providers.Call{Model: "claude", IncludeUsage: true})
		defer s.Close()
		out, _, _ := s.Event(nil, start)
		for _, e := range [][]byte{ev, ev, []byte("data: {\"type\":\"message_stop\"}\n\n")} {
			out, _, _ = s.Event(out, e)
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data != "[DONE]" && !json.Valid([]byte(data)) {
				t.Fatalf("bad output event %q for input %q", line, ev)
			}
		}
	})
}
