package mockllm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// responseObject is the subset of a Responses API response the tests read.
type responseObject struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Status            string          `json:"status"`
	Model             string          `json:"model"`
	Error             json.RawMessage `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens        int `json:"output_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
		TotalTokens int `json:"total_tokens"`
	} `json:"usage"`
}

func (r *responseObject) text() string {
	var b strings.Builder
	for _, o := range r.Output {
		for _, c := range o.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// responsesBody has 4 + 3 input tokens ("say four words here please" is 5:
// see the cases) and 2 + 3 for instructions.
const responsesBody = `{"model":"gpt-test","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"say four words here"}]}]`

func TestResponsesNonStream(t *testing.T) {
	ts := start(t, mockllm.Config{Chunks: 6})
	tests := []struct {
		name               string
		path, body         string
		headers            []string
		status             string
		words              int
		input, cached      int
		reasoning          int
		noUsage            bool
		incompleteReason   string
		wantHTTP           int
		wantErrorSubstring string
	}{
		{name: "default", path: "/v1/responses", body: responsesBody + `}`, status: "completed", words: 6, input: 4 + 3 + 2 + 3},
		{name: "string input", path: "/v1/responses", body: `{"model":"m","input":"one two three"}`, status: "completed", words: 6, input: 3},
		{name: "azure path", path: "/openai/v1/responses", body: `{"model":"dep","input":"a"}`, status: "completed", words: 6, input: 1},
		{name: "max_output_tokens cuts", path: "/v1/responses", body: `{"model":"m","input":"a","max_output_tokens":2}`, status: "incomplete", words: 2, input: 1, incompleteReason: "max_output_tokens"},
		{name: "max_output_tokens above the answer", path: "/v1/responses", body: `{"model":"m","input":"a","max_output_tokens":100}`, status: "completed", words: 6, input: 1},
		{name: "usage details", path: "/v1/responses", body: `{"model":"m","input":"a b c d","mock":{"cached_tokens":3}}`, headers: []string{"X-Mock-Reasoning-Tokens", "10"},
			status: "completed", words: 6, input: 4, cached: 3, reasoning: 10},
		{name: "cached at most the input", path: "/v1/responses", body: `{"model":"m","input":"a","mock":{"cached_tokens":50}}`, status: "completed", words: 6, input: 1, cached: 1},
		{name: "no usage", path: "/v1/responses", body: `{"model":"m","input":"a"}`, headers: []string{"X-Mock-No-Usage", "1"}, status: "completed", words: 6, noUsage: true},
		{name: "injected 503", path: "/v1/responses", body: `{"model":"m","input":"a"}`, headers: []string{"X-Mock-Status", "503"}, wantHTTP: 503, wantErrorSubstring: "injected"},
		{name: "no model", path: "/v1/responses", body: `{"input":"a"}`, wantHTTP: 400, wantErrorSubstring: "model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := ts.post(t, tc.path, tc.body, tc.headers...)
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantHTTP != 0 {
				if resp.StatusCode != tc.wantHTTP || !strings.Contains(string(raw), tc.wantErrorSubstring) {
					t.Fatalf("status %d body %s, want %d with %q", resp.StatusCode, raw, tc.wantHTTP, tc.wantErrorSubstring)
				}
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			var r responseObject
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("decode %s: %v", raw, err)
			}
			if r.Object != "response" || !strings.HasPrefix(r.ID, "resp_") || r.Status != tc.status || string(r.Error) != "null" {
				t.Errorf("object %q id %q status %q error %s", r.Object, r.ID, r.Status, r.Error)
			}
			if got := len(strings.Fields(r.text())); got != tc.words {
				t.Errorf("%d words (%q), want %d", got, r.text(), tc.words)
			}
			if tc.incompleteReason != "" && (r.IncompleteDetails == nil || r.IncompleteDetails.Reason != tc.incompleteReason) {
				t.Errorf("incomplete_details %+v", r.IncompleteDetails)
			}
			if tc.noUsage {
				if r.Usage != nil {
					t.Errorf("usage %+v, want null", r.Usage)
				}
				return
			}
			u := r.Usage
			if u == nil {
				t.Fatal("no usage")
			}
			if u.InputTokens != tc.input || u.OutputTokens != tc.words+tc.reasoning || u.TotalTokens != u.InputTokens+u.OutputTokens ||
				u.InputTokensDetails.CachedTokens != tc.cached || u.OutputTokensDetails.ReasoningTokens != tc.reasoning {
				t.Errorf("usage %+v", *u)
			}
		})
	}
}

func TestResponsesStream(t *testing.T) {
	ts := start(t, mockllm.Config{Chunks: 5})
	tests := []struct {
		name     string
		body     string
		headers  []string
		deltas   int
		terminal string // the last event's type; "" when the stream is cut
		usage    bool
	}{
		{name: "complete", body: `{"model":"m","input":"a b","stream":true}`, deltas: 5, terminal: "response.completed", usage: true},
		{name: "max_output_tokens", body: `{"model":"m","input":"a b","stream":true,"max_output_tokens":3}`, deltas: 3, terminal: "response.incomplete", usage: true},
		{name: "no usage", body: `{"model":"m","input":"a b","stream":true}`, headers: []string{"X-Mock-No-Usage", "1"}, deltas: 5, terminal: "response.completed"},
		{name: "failed", body: `{"model":"m","input":"a b","stream":true,"mock":{"error_event_after":2}}`, deltas: 2, terminal: "response.failed"},
		{name: "cut", body: `{"model":"m","input":"a b","stream":true}`, headers: []string{"X-Mock-Cut-After", "1"}, deltas: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := ts.post(t, "/v1/responses", tc.body, tc.headers...)
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("content type %q", ct)
			}
			named, err := readNamedEvents(resp.Body)
			if tc.terminal != "" && err != nil {
				t.Fatalf("read: %v", err)
			}
			type decoded struct {
				name string
				data map[string]json.RawMessage
			}
			var evs []decoded
			for _, ev := range named {
				d := decoded{name: ev.name}
				if ev.name == "RAW" || json.Unmarshal([]byte(ev.data), &d.data) != nil {
					t.Fatalf("not a JSON event: %+v", ev)
				}
				evs = append(evs, d)
			}
			var text strings.Builder
			deltas := 0
			for i, ev := range evs {
				var typ string
				var seq int
				if json.Unmarshal(ev.data["type"], &typ) != nil || json.Unmarshal(ev.data["sequence_number"], &seq) != nil {
					t.Fatalf("event %d lacks type or sequence_number: %v", i, ev.data)
				}
				if typ != ev.name || seq != i {
					t.Errorf("event %d: name %q type %q sequence %d", i, ev.name, typ, seq)
				}
				if typ == "response.output_text.delta" {
					var d string
					_ = json.Unmarshal(ev.data["delta"], &d)
					text.WriteString(d)
					deltas++
				}
			}
			if deltas != tc.deltas {
				t.Errorf("%d deltas, want %d", deltas, tc.deltas)
			}
			if evs[0].name != "response.created" {
				t.Errorf("first event %q", evs[0].name)
			}
			last := evs[len(evs)-1]
			if tc.terminal == "" {
				if strings.HasPrefix(last.name, "response.") && last.name != "response.output_text.delta" {
					t.Errorf("cut stream ends with %q", last.name)
				}
				return
			}
			if last.name != tc.terminal {
				t.Fatalf("last event %q, want %q", last.name, tc.terminal)
			}
			var r responseObject
			if err := json.Unmarshal(last.data["response"], &r); err != nil {
				t.Fatal(err)
			}
			if r.text() != text.String() {
				t.Errorf("final text %q, deltas %q", r.text(), text.String())
			}
			if (r.Usage != nil) != tc.usage || (tc.usage && r.Usage.OutputTokens != tc.deltas) {
				t.Errorf("usage %+v", r.Usage)
			}
			if tc.terminal == "response.completed" && len(evs) != 4+tc.deltas+4 {
				t.Errorf("%d events, want %d", len(evs), 8+tc.deltas)
			}
		})
	}
	if st := ts.srv.Stats(); st.Responses != int64(len(tests)) {
		t.Errorf("stats count %d responses requests", st.Responses)
	}
}

// TestResponsesLedger: Responses answers are in the ledger as the gateway
// bills them: output_tokens (reasoning included) as completion tokens, and
// streams with usage, which they report unasked.
func TestResponsesLedger(t *testing.T) {
	tests := []struct {
		name, body string
		want       mockllm.LedgerEntry
	}{
		{"non-stream", `{"model":"m","input":"a b","mock":{"chunks":3,"reasoning_tokens":4}}`, mockllm.LedgerEntry{Model: "m", PromptTokens: 2, CompletionTokens: 3 + 4, Count: 1}},
		{"stream", `{"model":"m","input":"a b","stream":true,"mock":{"chunks":3}}`, mockllm.LedgerEntry{Model: "m", PromptTokens: 2, CompletionTokens: 3, Count: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := start(t, mockllm.Config{})
			if _, err := io.Copy(io.Discard, ts.post(t, "/v1/responses", tc.body).Body); err != nil {
				t.Fatal(err)
			}
			var got mockllm.Ledger
			waitStats(t, ts.srv, func(mockllm.Stats) bool { got = ts.srv.Ledger(); return len(got.Answers) == 1 })
			if got.Answers[0] != tc.want || got.WithoutUsage != 0 || got.Incomplete != 0 {
				t.Errorf("ledger %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestResponsesTools: a Responses request naming one of its function tools
// is answered with a call of it, whole or streamed (arguments split over
// function_call_arguments.delta events that add up to the done
// arguments, every event numbered in order), and a trailing
// function_call_output is quoted in the text answer.
func TestResponsesTools(t *testing.T) {
	ts := start(t, mockllm.Config{Chunks: 4})
	const tools = `"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	t.Run("call", func(t *testing.T) {
		var r struct {
			Output []struct {
				Type, Name, Arguments, Status string
				CallID                        string `json:"call_id"`
			} `json:"output"`
		}
		raw := ts.postJSON(t, "/v1/responses", `{"model":"m",`+tools+`,"input":"use get_weather for Paris"}`, &r)
		if raw.StatusCode != 200 || len(r.Output) != 1 || r.Output[0].Type != "function_call" || r.Output[0].Name != "get_weather" ||
			r.Output[0].Status != "completed" || r.Output[0].CallID == "" {
			t.Fatalf("output %+v", r.Output)
		}
		var args struct{ City string }
		if err := json.Unmarshal([]byte(r.Output[0].Arguments), &args); err != nil || args.City == "" {
			t.Errorf("arguments %q: %v", r.Output[0].Arguments, err)
		}
	})
	t.Run("streamed call", func(t *testing.T) {
		resp := ts.post(t, "/v1/responses", `{"model":"m","stream":true,`+tools+`,"input":[{"role":"user","content":"use get_weather for Paris"}]}`)
		named, err := readNamedEvents(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		var args strings.Builder
		var done, final string
		for i, ev := range named {
			var d struct {
				Type      string `json:"type"`
				Seq       int    `json:"sequence_number"`
				Delta     string `json:"delta"`
				Arguments string `json:"arguments"`
				Response  struct {
					Output []struct{ Arguments string } `json:"output"`
				} `json:"response"`
			}
			if err := json.Unmarshal([]byte(ev.data), &d); err != nil || d.Type != ev.name || d.Seq != i {
				t.Fatalf("event %d %q: %s (%v)", i, ev.name, ev.data, err)
			}
			names = append(names, d.Type)
			switch d.Type {
			case "response.function_call_arguments.delta":
				args.WriteString(d.Delta)
			case "response.function_call_arguments.done":
				done = d.Arguments
			case "response.completed":
				if len(d.Response.Output) == 1 {
					final = d.Response.Output[0].Arguments
				}
			}
		}
		want := []string{"response.created", "response.in_progress", "response.output_item.added"}
		if len(names) < 7 || strings.Join(names[:3], ",") != strings.Join(want, ",") ||
			strings.Join(names[len(names)-3:], ",") != "response.function_call_arguments.done,response.output_item.done,response.completed" {
			t.Errorf("events %v", names)
		}
		if args.String() != done || done != final || !json.Valid([]byte(done)) {
			t.Errorf("deltas %q, done %q, completed %q", args.String(), done, final)
		}
	})
	t.Run("result quoted", func(t *testing.T) {
		var r responseObject
		resp := ts.postJSON(t, "/v1/responses", `{"model":"m",`+tools+`,"input":[{"role":"user","content":"use get_weather for Paris"},`+
			`{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{}"},`+
			`{"type":"function_call_output","call_id":"call_1","output":"sunny"}]}`, &r)
		if resp.StatusCode != 200 || !strings.Contains(r.text(), "(tool result: sunny)") {
			t.Errorf("answer %q", r.text())
		}
	})
}
