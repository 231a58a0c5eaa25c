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

// encode feeds an OpenAI SSE transcript through a new encoder.
func encode(t testing.TB, transcript []byte) ([]byte, *Encoder) {
	t.Helper()
	e := NewEncoder("claude-sonnet-4-5", "req_1")
	r := sse.NewReader(bytes.NewReader(transcript), 512, 1<<20)
	var out []byte
	for {
		ev, ok := r.Next()
		if !ok {
			if err := r.Fill(); errors.Is(err, io.EOF) {
				return out, e
			} else if err != nil {
				t.Fatal(err)
			}
			continue
		}
		var err error
		if out, err = e.Event(out, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// anthropicEvent is the union of the fields of Anthropic stream events.
type anthropicEvent struct {
	Type    string `json:"type"`
	Index   *int   `json:"index"`
	Message *struct {
		ID           string          `json:"id"`
		Type         string          `json:"type"`
		Role         string          `json:"role"`
		Model        string          `json:"model"`
		Content      json.RawMessage `json:"content"`
		StopReason   *string         `json:"stop_reason"`
		StopSequence *string         `json:"stop_sequence"`
		Usage        *struct {
			InputTokens  *int `json:"input_tokens"`
			OutputTokens *int `json:"output_tokens"`
		} `json:"usage"`
	} `json:"message"`
	Block *struct {
		Type  string          `json:"type"`
		Text  *string         `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content_block"`
	Delta *struct {
		Type         string  `json:"type"`
		Text         string  `json:"text"`
		PartialJSON  string  `json:"partial_json"`
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		CacheRead    int `json:"cache_read_input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anthropicResult is what an Anthropic SDK accumulates from a stream.
type anthropicResult struct {
	text       string
	tools      []struct{ id, name, input string }
	stop       string
	input      int
	cacheRead  int
	output     int
	eventNames []string
}

// checkAnthropicStream checks the exact event grammar of a Messages
// stream: message_start, ping, then blocks (start, deltas of their kind,
// stop) with indexes counting from 0, then message_delta and message_stop.
func checkAnthropicStream(t *testing.T, out []byte) anthropicResult {
	t.Helper()
	var res anthropicResult
	raw := strings.Split(string(out), "\n\n")
	if raw[len(raw)-1] != "" {
		t.Fatalf("output does not end with a blank line: %q", out)
	}
	open, next := "", 0
	for i, ev := range raw[:len(raw)-1] {
		lines := strings.Split(ev, "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("event %d is not an event line and a data line: %q", i, ev)
		}
		name := strings.TrimPrefix(lines[0], "event: ")
		var e anthropicEvent
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &e); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, lines[1])
		}
		if e.Type != name {
			t.Errorf("event %d named %q has type %q", i, name, e.Type)
		}
		res.eventNames = append(res.eventNames, name)
		if want := [...]string{"message_start", "ping"}; i < len(want) && name != want[i] {
			t.Fatalf("event %d is %s, want %s", i, name, want[i])
		}
		switch name {
		case "message_start":
			m := e.Message
			if m == nil || m.ID != "msg_req_1" || m.Type != "message" || m.Role != "assistant" || m.Model != "claude-sonnet-4-5" ||
				string(m.Content) != "[]" || m.StopReason != nil || m.Usage == nil || m.Usage.InputTokens == nil || m.Usage.OutputTokens == nil {
				t.Errorf("message_start %s", lines[1])
			}
		case "content_block_start":
			if open != "" || e.Index == nil || *e.Index != next || e.Block == nil {
				t.Fatalf("block start %s with %q open, next index %d", lines[1], open, next)
			}
			open = e.Block.Type
			switch open {
			case "text":
				if e.Block.Text == nil || *e.Block.Text != "" {
					t.Errorf("text block start %s", lines[1])
				}
			case "tool_use":
				if e.Block.ID == "" || e.Block.Name == "" || string(e.Block.Input) != "{}" {
					t.Errorf("tool block start %s", lines[1])
				}
				res.tools = append(res.tools, struct{ id, name, input string }{e.Block.ID, e.Block.Name, ""})
			default:
				t.Errorf("block type %q", open)
			}
		case "content_block_delta":
			if e.Index == nil || *e.Index != next || e.Delta == nil {
				t.Fatalf("delta %s for block %d", lines[1], next)
			}
			switch {
			case open == "text" && e.Delta.Type == "text_delta":
				res.text += e.Delta.Text
			case open == "tool_use" && e.Delta.Type == "input_json_delta":
				res.tools[len(res.tools)-1].input += e.Delta.PartialJSON
			default:
				t.Errorf("delta %s in a %s block", e.Delta.Type, open)
			}
		case "content_block_stop":
			if open == "" || e.Index == nil || *e.Index != next {
				t.Fatalf("block stop %s", lines[1])
			}
			open = ""
			next++
		case "message_delta":
			if e.Delta == nil || e.Delta.StopReason == "" || e.Usage == nil {
				t.Fatalf("message_delta %s", lines[1])
			}
			res.stop = e.Delta.StopReason
			res.input, res.cacheRead, res.output = e.Usage.InputTokens, e.Usage.CacheRead, e.Usage.OutputTokens
		}
	}
	if n := len(res.eventNames); n < 4 || res.eventNames[n-2] != "message_delta" || res.eventNames[n-1] != "message_stop" {
		t.Errorf("stream does not end with message_delta, message_stop: %v", res.eventNames)
	}
	for _, tc := range res.tools {
		if tc.input != "" && !json.Valid([]byte(tc.input)) {
			t.Errorf("tool %s input %q is not JSON", tc.id, tc.input)
		}
	}
	return res
}

func TestEncoderGolden(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		tools  int
		stop   string
		input  int
		cached int
		output int
		seq    string
	}{
		{"text", "Hello, \"world\"\né", 0, "end_turn", 8, 32, 6,
			"message_start ping content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"},
		{"tool_calls", "Checking.", 2, "tool_use", 100, 0, 20,
			"message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop"},
		{"length_no_usage", "cut short", 0, "max_tokens", 0, 0, 0,
			"message_start ping content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, e := encode(t, readFile(t, filepath.Join("testdata", "encoder", tt.name+".sse")))
			defer e.Release()
			if !e.Closed() {
				t.Errorf("encoder not closed after [DONE]")
			}
			golden(t, filepath.Join("testdata", "encoder", tt.name+".golden.sse"), out)
			res := checkAnthropicStream(t, out)
			if got := strings.Join(res.eventNames, " "); got != tt.seq {
				t.Errorf("sequence\n got: %s\nwant: %s", got, tt.seq)
			}
			if res.text != tt.text || len(res.tools) != tt.tools || res.stop != tt.stop || res.input != tt.input || res.cacheRead != tt.cached || res.output != tt.output {
				t.Errorf("result %+v", res)
			}
		})
	}
}

func TestEncoderEndings(t *testing.T) {
	const chunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n"
	t.Run("finish without done", func(t *testing.T) {
		e := NewEncoder("claude-sonnet-4-5", "req_1")
		defer e.Release()
		out, err := e.Event(nil, []byte(chunk))
		if err != nil {
			t.Fatal(err)
		}
		out = e.Finish(out)
		res := checkAnthropicStream(t, out)
		if res.stop != "end_turn" || res.text != "hi" {
			t.Errorf("result %+v", res)
		}
		if again := e.Finish(nil); len(again) != 0 {
			t.Errorf("second Finish wrote %q", again)
		}
	})
	t.Run("done only", func(t *testing.T) {
		e := NewEncoder("claude-sonnet-4-5", "req_1")
		defer e.Release()
		out, err := e.Event(nil, []byte("data: [DONE]\n\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(out), "event: "); got != 4 { // start, ping, delta, stop
			t.Errorf("%d events: %s", got, out)
		}
	})
	t.Run("fail mid-stream", func(t *testing.T) {
		e := NewEncoder("claude-sonnet-4-5", "req_1")
		defer e.Release()
		out, _ := e.Event(nil, []byte(chunk))
		n := len(out)
		out = e.Fail(out, ErrOverloaded, "provider \"x\" failed")
		want := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"provider \\\"x\\\" failed\"}}\n\n"
		if string(out[n:]) != want {
			t.Errorf("error event %q, want %q", out[n:], want)
		}
		if more, _ := e.Event(nil, []byte(chunk)); len(more) != 0 || len(e.Finish(nil)) != 0 {
			t.Errorf("events written after Fail")
		}
	})
	t.Run("openai error event", func(t *testing.T) {
		e := NewEncoder("claude-sonnet-4-5", "req_1")
		defer e.Release()
		out, err := e.Event(nil, []byte("data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n"))
		if err != nil || !strings.HasPrefix(string(out), "event: error\n") || !e.Closed() {
			t.Errorf("out %q err %v", out, err)
		}
	})
	t.Run("several events per call", func(t *testing.T) {
		in := readFile(t, filepath.Join("testdata", "encoder", "tool_calls.sse"))
		want, e1 := encode(t, in)
		e1.Release()
		e := NewEncoder("claude-sonnet-4-5", "req_1")
		defer e.Release()
		half := bytes.Index(in, []byte("\n\ndata: {\"id\":\"chatcmpl-2\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},")) + 2
		out, err := e.Events(nil, in[:half])
		if err == nil {
			out, err = e.Events(out, in[half:])
		}
		if err != nil || !bytes.Equal(out, want) {
			t.Errorf("err %v, output differs:\n got %s\nwant %s", err, out, want)
		}
		if _, err := NewEncoder("m", "r").Events(nil, []byte("data: {}\n")); err == nil {
			t.Errorf("accepted an incomplete event")
		}
	})
	t.Run("not JSON", func(t *testing.T) {
		e := NewEncoder("claude-sonnet-4-5", "req_1")
		defer e.Release()
		if _, err := e.Event(nil, []byte("data: {nope\n\n")); err == nil {
			t.Errorf("accepted a broken event")
		}
	})
}

// FuzzEncoder feeds arbitrary OpenAI events: the encoder never panics and
// writes only well-formed events with JSON data.
func FuzzEncoder(f *testing.F) {
	for _, name := range []string{"text", "tool_calls", "length_no_usage"} {
		b, err := readFileErr(filepath.Join("testdata", "encoder", name+".sse"))
		if err != nil {
			f.Fatal(err)
		}
		for _, ev := range bytes.SplitAfter(b, []byte("\n\n")) {
			f.Add(ev)
		}
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"\xff\"}}]}}]}\n\n"))
	f.Fuzz(func(t *testing.T, ev []byte) {
		e := NewEncoder("m\"", "r\\")
		defer e.Release()
		var out []byte
		for _, in := range [][]byte{ev, ev, []byte("data: [DONE]\n\n")} {
			out, _ = e.Event(out, in)
		}
		for _, event := range strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
			if event == "" {
				continue
			}
			name, data, ok := strings.Cut(event, "\ndata: ")
			if !ok || !strings.HasPrefix(name, "event: ") || !json.Valid([]byte(data)) {
				t.Fatalf("bad output event %q for input %q", event, ev)
			}
		}
	})
}

// TestRoundTrip relays Anthropic streams through a provider's Stream (to
// OpenAI chunks, several per call at the end) and back through Events, as
// the gateway serves /v1/messages from a translating provider.
func TestRoundTrip(t *testing.T) {
	p := testProvider(t, "")
	tests := []struct {
		name, text, stop string
		tools            int
		input, output    int
	}{
		{"text", "Hello, \"world\"\n 🎉 é", "end_turn", 0, 25, 15},
		{"tool_use", "Checking both.", "tool_use", 2, 472, 89},
		{"thinking", "4", "max_tokens", 0, 9, 120},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := p.Stream(&providers.Call{Model: "claude", IncludeUsage: true})
			defer s.Close()
			e := NewEncoder("claude-sonnet-4-5", "req_1")
			defer e.Release()
			r := sse.NewReader(bytes.NewReader(readFile(t, filepath.Join("testdata", "stream", tt.name+".sse"))), 512, 1<<20)
			var chunks, out []byte
			for !e.Closed() {
				ev, ok := r.Next()
				if !ok {
					if err := r.Fill(); err != nil {
						t.Fatalf("read: %v", err)
					}
					continue
				}
				var err error
				if chunks, _, err = s.Event(chunks[:0], ev); err != nil {
					t.Fatal(err)
				}
				if out, err = e.Events(out, chunks); err != nil {
					t.Fatal(err)
				}
			}
			res := checkAnthropicStream(t, out)
			if res.text != tt.text || res.stop != tt.stop || len(res.tools) != tt.tools || res.input != tt.input || res.output != tt.output {
				t.Errorf("result %+v", res)
			}
		})
	}
}

// fakeCounter counts prompts as a fixed number and records its calls.
type fakeCounter struct{ n, calls int }

func (c *fakeCounter) ChatPrompt([]byte) int { c.calls++; return c.n }

// TestEncoderStartUsage: message_start reports input tokens early (the
// estimate, unless the first upstream event reports usage), while
// message_delta and Usage keep the upstream's figures (issue #16).
func TestEncoderStartUsage(t *testing.T) {
	const (
		first      = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n"
		firstUsage = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":10}}}\n\n"
		last       = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n"
	)
	tests := []struct {
		name         string
		counter      *fakeCounter
		events       string
		start, final int // message_start and message_delta input_tokens
		counted      int // calls of the counter
		billedPrompt uint64
	}{
		{"estimate until the usage at the end", &fakeCounter{n: 42}, first + last, 42, 12, 1, 12},
		{"usage in the first event", &fakeCounter{n: 42}, firstUsage + last, 20, 12, 0, 12},
		{"no counter", nil, first + last, 0, 12, 0, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEncoder("claude-sonnet-4-5", "req_1")
			defer e.Release()
			if tt.counter != nil {
				e.EstimatePrompt(tt.counter, []byte(`{"messages":[]}`))
			}
			out, err := e.Events(nil, []byte(tt.events))
			if err != nil {
				t.Fatal(err)
			}
			var start, final int = -1, -1
			for _, line := range strings.Split(string(out), "\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				var ev struct {
					Type    string `json:"type"`
					Message struct {
						Usage struct {
							InputTokens int `json:"input_tokens"`
						} `json:"usage"`
					} `json:"message"`
					Usage struct {
						InputTokens int `json:"input_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					t.Fatalf("%s: %v", data, err)
				}
				switch ev.Type {
				case "message_start":
					start = ev.Message.Usage.InputTokens
				case "message_delta":
					final = ev.Usage.InputTokens
				}
			}
			calls := 0
			if tt.counter != nil {
				calls = tt.counter.calls
			}
			if start != tt.start || final != tt.final || calls != tt.counted || e.Usage().Prompt != tt.billedPrompt {
				t.Errorf("message_start %d, message_delta %d, counted %d times, usage %+v; want %d, %d, %d, %d",
					start, final, calls, e.Usage(), tt.start, tt.final, tt.counted, tt.billedPrompt)
			}
		})
	}
}
