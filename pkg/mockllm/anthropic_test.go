package mockllm_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// anthropicBody is a Messages request with a system prompt of 2 words and
// two messages of 3 and 2 words (one in text blocks with an image).
const anthropicBody = `{"model":"claude-test","max_tokens":100,"system":"Be terse.","messages":[` +
	`{"role":"user","content":"hello  there\nworld"},` +
	`{"role":"assistant","content":[{"type":"text","text":"hi you"}]},` +
	`{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}},{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]`

// anthropicPrompt is the documented count for anthropicBody: 2+3+2+1
// words, 3 per message and 3 for the system prompt.
const anthropicPrompt = 2 + 3 + 2 + 1 + 3*3 + 3

const anthropicTools = `"tools":[{"name":"get_weather","input_schema":{"type":"object"}},{"name":"get_time","input_schema":{"type":"object"}}]`

func anthropicWith(extra string) string {
	if extra == "" {
		return anthropicBody + "}"
	}
	return anthropicBody + "," + extra + "}"
}

// message is the Anthropic message object as the SDKs decode it.
type message struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        *struct {
		InputTokens         int `json:"input_tokens"`
		CacheCreationTokens int `json:"cache_creation_input_tokens"`
		OutputTokens        int `json:"output_tokens"`
	} `json:"usage"`
}

func TestAnthropicNonStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, body string
		headers    []string
		text       string
		tool       string
		noUsage    bool
		written    int // cache_creation_input_tokens
	}{
		{name: "text", body: anthropicWith(""), text: "Tollgate mock answer alpha bravo charlie delta echo"},
		{name: "words header", body: anthropicWith(""), headers: []string{"X-Mock-Words", "2"}, text: "Tollgate mock"},
		{name: "no usage", body: anthropicWith(`"mock":{"no_usage":true,"words":1}`), text: "Tollgate", noUsage: true},
		{name: "cache writes", body: anthropicWith(`"mock":{"words":1}`), headers: []string{"X-Mock-Cache-Write-Tokens", "15"}, text: "Tollgate", written: 15},
		{name: "cache writes at most the prompt", body: anthropicWith(`"mock":{"words":1,"cache_write_tokens":1000}`), text: "Tollgate", written: anthropicPrompt},
		{name: "tool any", body: anthropicWith(anthropicTools + `,"tool_choice":{"type":"any"},"mock":{"words":2}`), tool: "get_weather", text: "Tollgate mock"},
		{name: "tool named", body: anthropicWith(anthropicTools + `,"tool_choice":{"type":"tool","name":"get_time"},"mock":{"words":1}`), tool: "get_time", text: "Tollgate"},
		{name: "tool auto answers text", body: anthropicWith(anthropicTools + `,"tool_choice":{"type":"auto"},"mock":{"words":1}`), text: "Tollgate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m message
			resp := ts.postJSON(t, "/v1/messages", tt.body, &m, tt.headers...)
			if !strings.HasPrefix(resp.Header.Get("request-id"), "req_") {
				t.Errorf("request-id header %q", resp.Header.Get("request-id"))
			}
			if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" || m.Model != "claude-test" || len(m.Content) != 1 {
				t.Fatalf("message %+v", m)
			}
			c := m.Content[0]
			want := len(strings.Fields(tt.text))
			if tt.tool == "" {
				if c.Type != "text" || c.Text != tt.text || m.StopReason != "end_turn" {
					t.Errorf("content %+v stop %q", c, m.StopReason)
				}
			} else {
				var in map[string]string
				if err := json.Unmarshal(c.Input, &in); err != nil {
					t.Fatalf("input %s: %v", c.Input, err)
				}
				if c.Type != "tool_use" || c.Name != tt.tool || !strings.HasPrefix(c.ID, "toolu_") || in["input"] != tt.text || m.StopReason != "tool_use" {
					t.Errorf("content %+v stop %q", c, m.StopReason)
				}
			}
			if m.StopSequence != nil {
				t.Errorf("stop_sequence %q", *m.StopSequence)
			}
			switch {
			case tt.noUsage && m.Usage != nil:
				t.Errorf("usage %+v, want none", m.Usage)
			case !tt.noUsage && (m.Usage == nil || m.Usage.InputTokens+m.Usage.CacheCreationTokens != anthropicPrompt ||
				m.Usage.CacheCreationTokens != tt.written || m.Usage.OutputTokens != want):
				t.Errorf("usage %+v, want %d in (%d written to cache) %d out", m.Usage, anthropicPrompt, tt.written, want)
			}
		})
	}
}

func TestAnthropicErrors(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, body  string
		headers     []string
		status      int
		typ         string
		retryAfter  bool
		notJSONBody bool
	}{
		{name: "no max_tokens", body: `{"model":"m","messages":[]}`, status: 400, typ: "invalid_request_error"},
		{name: "no model", body: `{"max_tokens":1,"messages":[]}`, status: 400, typ: "invalid_request_error"},
		{name: "not JSON", body: `{"model":`, status: 400, typ: "invalid_request_error"},
		{name: "overloaded", body: anthropicWith(""), headers: []string{"X-Mock-Status", "529"}, status: 529, typ: "overloaded_error", retryAfter: true},
		{name: "rate limited", body: anthropicWith(`"mock":{"status":429}`), status: 429, typ: "rate_limit_error", retryAfter: true},
		{name: "auth", body: anthropicWith(""), headers: []string{"X-Mock-Status", "401"}, status: 401, typ: "authentication_error"},
		{name: "server", body: anthropicWith(""), headers: []string{"X-Mock-Status", "500"}, status: 500, typ: "api_error"},
		{name: "garbage", body: anthropicWith(""), headers: []string{"X-Mock-Garbage", "1"}, status: 200, notJSONBody: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, "/v1/messages", tt.body, tt.headers...)
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, raw)
			}
			if tt.notJSONBody {
				if json.Valid(raw) {
					t.Errorf("garbage body is valid JSON: %s", raw)
				}
				return
			}
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &e); err != nil || e.Type != "error" || e.Error.Type != tt.typ || e.Error.Message == "" {
				t.Errorf("error body %s (%v), want type %s", raw, err, tt.typ)
			}
			if got := resp.Header.Get("Retry-After") != ""; got != tt.retryAfter {
				t.Errorf("Retry-After present %v, want %v", got, tt.retryAfter)
			}
		})
	}
}

// namedEvent is one SSE event with its event name.
type namedEvent struct {
	name, data string
}

// readNamedEvents reads "event:"/"data:" pairs until the body ends; a line
// of another form is returned as an event named "RAW".
func readNamedEvents(r io.Reader) ([]namedEvent, error) {
	br := bufio.NewReader(r)
	var out []namedEvent
	var cur namedEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if line != "" {
				out = append(out, namedEvent{name: "RAW", data: line})
			}
			if errors.Is(err, io.EOF) && line == "" {
				err = nil
			}
			return out, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if cur != (namedEvent{}) {
				out = append(out, cur)
			}
			cur = namedEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			out = append(out, namedEvent{name: "RAW", data: line})
		}
	}
}

// streamEvent is the union of the Anthropic stream event fields tests read.
type streamEvent struct {
	Type    string   `json:"type"`
	Index   int      `json:"index"`
	Message *message `json:"message"`
	Block   *struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *struct {
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Type string `json:"type"`
	} `json:"error"`
}

func TestAnthropicStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, body string
		headers    []string
		chunks     int
		tool       string
		noUsage    bool
	}{
		{name: "text", body: anthropicWith(`"stream":true`), chunks: 8},
		{name: "text 3 chunks", body: anthropicWith(`"stream":true,"mock":{"chunks":3}`), chunks: 3},
		{name: "zero chunks", body: anthropicWith(`"stream":true,"mock":{"chunks":0}`), chunks: 0},
		{name: "no usage", body: anthropicWith(`"stream":true`), headers: []string{"X-Mock-No-Usage", "1", "X-Mock-Chunks", "2"}, chunks: 2, noUsage: true},
		{name: "tool", body: anthropicWith(`"stream":true,` + anthropicTools + `,"tool_choice":{"type":"any"},"mock":{"chunks":4}`), chunks: 4, tool: "get_weather"},
		{name: "tool named", body: anthropicWith(`"stream":true,` + anthropicTools + `,"tool_choice":{"type":"tool","name":"get_time"},"mock":{"chunks":1}`), chunks: 1, tool: "get_time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, "/v1/messages", tt.body, tt.headers...)
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("content type %q", ct)
			}
			events, err := readNamedEvents(resp.Body)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			var seq []string
			var text, args strings.Builder
			var output = -1
			var input = -1
			var stop string
			for _, ev := range events {
				var e streamEvent
				if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
					t.Fatalf("event %q: %v", ev.data, err)
				}
				if e.Type != ev.name {
					t.Errorf("event name %q, data type %q", ev.name, e.Type)
				}
				if e.Type != "content_block_delta" {
					seq = append(seq, e.Type)
				}
				switch e.Type {
				case "message_start":
					if e.Message == nil || !strings.HasPrefix(e.Message.ID, "msg_") || e.Message.Model != "claude-test" {
						t.Errorf("message_start %s", ev.data)
					}
					if e.Message != nil && e.Message.Usage != nil {
						input = e.Message.Usage.InputTokens
					}
				case "content_block_start":
					if tt.tool == "" && e.Block.Type != "text" || tt.tool != "" && (e.Block.Type != "tool_use" || e.Block.Name != tt.tool || !strings.HasPrefix(e.Block.ID, "toolu_")) {
						t.Errorf("block %s", ev.data)
					}
				case "content_block_delta":
					text.WriteString(e.Delta.Text)
					args.WriteString(e.Delta.PartialJSON)
				case "message_delta":
					stop = e.Delta.StopReason
					if e.Usage != nil {
						output = e.Usage.OutputTokens
					}
				}
			}
			want := []string{"message_start", "content_block_start", "ping", "content_block_stop", "message_delta", "message_stop"}
			if strings.Join(seq, ",") != strings.Join(want, ",") {
				t.Errorf("events %v, want %v", seq, want)
			}
			got := text.String()
			wantStop := "end_turn"
			if tt.tool != "" {
				wantStop = "tool_use"
				var in map[string]string
				if err := json.Unmarshal([]byte(args.String()), &in); err != nil {
					t.Fatalf("input %q: %v", args.String(), err)
				}
				got = in["input"]
			}
			if n := len(strings.Fields(got)); n != tt.chunks || stop != wantStop {
				t.Errorf("answer %q (%d words, want %d), stop %q", got, n, tt.chunks, stop)
			}
			if tt.noUsage {
				if input != -1 || output != -1 {
					t.Errorf("usage sent: input %d output %d", input, output)
				}
			} else if input != anthropicPrompt || output != tt.chunks {
				t.Errorf("usage input %d output %d, want %d %d", input, output, anthropicPrompt, tt.chunks)
			}
		})
	}
}

func TestAnthropicStreamInterruptions(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name     string
		headers  []string
		deltas   int
		last     string // name of the last event
		readErr  bool
		errorEvt bool
	}{
		{name: "cut after 2", headers: []string{"X-Mock-Cut-After", "2"}, deltas: 2, last: "content_block_delta", readErr: true},
		{name: "garbage", headers: []string{"X-Mock-Garbage", "1"}, deltas: 0, last: "RAW", readErr: true},
		{name: "error event after 3", headers: []string{"X-Mock-Error-Event-After", "3"}, deltas: 3, last: "error", errorEvt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts.srv.ResetStats()
			resp := ts.post(t, "/v1/messages", anthropicWith(`"stream":true`), tt.headers...)
			events, err := readNamedEvents(resp.Body)
			if tt.readErr != (err != nil) {
				t.Errorf("read error %v, want error %v", err, tt.readErr)
			}
			deltas := 0
			for _, ev := range events {
				switch ev.name {
				case "content_block_delta":
					deltas++
				case "message_delta", "message_stop":
					t.Errorf("interrupted stream sent %s", ev.name)
				}
			}
			if deltas != tt.deltas || len(events) == 0 || events[len(events)-1].name != tt.last {
				t.Errorf("%d deltas, events %v", deltas, events)
			}
			if tt.errorEvt {
				var e streamEvent
				if err := json.Unmarshal([]byte(events[len(events)-1].data), &e); err != nil || e.Error == nil || e.Error.Type != "overloaded_error" {
					t.Errorf("error event %q: %v", events[len(events)-1].data, err)
				}
			}
			st := waitStats(t, ts.srv, func(s mockllm.Stats) bool { return s.CompletionTokens == int64(tt.deltas) })
			if st.FailuresInjected != 1 || st.StreamsStarted != 1 || st.StreamsCompleted != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// anthropicIDs matches the parts of an Anthropic stream that change on
// every run.
var anthropicIDs = regexp.MustCompile(`"(msg_|toolu_)[0-9a-f]{16}(_[0-9]+)?"`)

func TestAnthropicGoldenTranscripts(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, body string
	}{
		{"anthropic_stream_text", anthropicWith(`"stream":true,"mock":{"chunks":3}`)},
		{"anthropic_stream_tool_use", anthropicWith(`"stream":true,` + anthropicTools + `,"tool_choice":{"type":"any"},"mock":{"chunks":2}`)},
		{"anthropic_stream_parallel_tool_use", anthropicWith(`"stream":true,` + anthropicSchemaTools + `,"tool_choice":{"type":"any"},"mock":{"chunks":5,"tool_calls":2}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, "/v1/messages", tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			got := anthropicIDs.ReplaceAllStringFunc(string(raw), func(m string) string {
				id := m[:strings.IndexByte(m, '_')+1] + "ID"
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

// BenchmarkAnthropicStreamHandler50 measures the Messages handler and the
// writing of a 50-chunk stream. Expected: 0 allocs/op.
func BenchmarkAnthropicStreamHandler50(b *testing.B) {
	h := mockllm.New(mockllm.Config{Chunks: 50}).Handler()
	ctx := handlerCtx(anthropicWith(`"stream":true`))
	ctx.Request.SetRequestURI("/v1/messages")
	bw := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
		if err := ctx.Response.Write(bw); err != nil {
			b.Fatal(err)
		}
	}
}
