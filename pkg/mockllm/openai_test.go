package mockllm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// completion is the chat.completion / text_completion object as the SDKs
// decode it.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message struct {
			Role      string     `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func TestNonStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, path, body string
		headers          []string
		object, idPrefix string
		text             string
		prompt           int
		noUsage          bool
	}{
		{
			name: "chat default words", path: "/v1/chat/completions", body: withFields(""),
			object: "chat.completion", idPrefix: "chatcmpl-",
			text:   "Tollgate mock answer alpha bravo charlie delta echo",
			prompt: chatPromptTokens,
		},
		{
			name: "chat words header", path: "/v1/chat/completions", body: withFields(""),
			headers: []string{"X-Mock-Words", "2"},
			object:  "chat.completion", idPrefix: "chatcmpl-", text: "Tollgate mock", prompt: chatPromptTokens,
		},
		{
			name: "chat no usage", path: "/v1/chat/completions", body: withFields(`"mock":{"no_usage":true,"words":1}`),
			object: "chat.completion", idPrefix: "chatcmpl-", text: "Tollgate", noUsage: true,
		},
		{
			name: "text completion string prompt", path: "/v1/completions",
			body:   `{"model":"gpt-test","prompt":"one two three","mock":{"words":3}}`,
			object: "text_completion", idPrefix: "cmpl-", text: "Tollgate mock answer", prompt: 3,
		},
		{
			name: "text completion array prompt", path: "/v1/completions",
			body:   `{"model":"gpt-test","prompt":["a b","c"],"mock":{"words":1}}`,
			object: "text_completion", idPrefix: "cmpl-", text: "Tollgate", prompt: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now().Unix()
			var c completion
			resp := ts.postJSON(t, tt.path, tt.body, &c, tt.headers...)
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			if !strings.HasPrefix(c.ID, tt.idPrefix) || len(c.ID) <= len(tt.idPrefix) {
				t.Errorf("id %q, want prefix %q", c.ID, tt.idPrefix)
			}
			if c.Object != tt.object {
				t.Errorf("object %q, want %q", c.Object, tt.object)
			}
			if c.Created < before || c.Created > time.Now().Unix() {
				t.Errorf("created %d is not now in unix seconds", c.Created)
			}
			if c.Model != "gpt-test" {
				t.Errorf("model %q", c.Model)
			}
			if len(c.Choices) != 1 {
				t.Fatalf("%d choices", len(c.Choices))
			}
			ch := c.Choices[0]
			got := ch.Text
			if tt.object == "chat.completion" {
				if ch.Message.Role != "assistant" || ch.Message.Content == nil {
					t.Fatalf("message %+v", ch.Message)
				}
				got = *ch.Message.Content
			}
			if got != tt.text {
				t.Errorf("text %q, want %q", got, tt.text)
			}
			if ch.Index != 0 || ch.FinishReason != "stop" {
				t.Errorf("index %d finish %q", ch.Index, ch.FinishReason)
			}
			switch {
			case tt.noUsage && c.Usage != nil:
				t.Errorf("usage %+v with no_usage", c.Usage)
			case !tt.noUsage && c.Usage == nil:
				t.Errorf("no usage")
			case !tt.noUsage:
				words := len(strings.Fields(tt.text))
				want := usage{tt.prompt, words, tt.prompt + words}
				if *c.Usage != want {
					t.Errorf("usage %+v, want %+v", *c.Usage, want)
				}
			}
		})
	}
}

func TestIDsAreUnique(t *testing.T) {
	ts := start(t, mockllm.Config{})
	seen := map[string]bool{}
	for range 20 {
		var c completion
		ts.postJSON(t, "/v1/chat/completions", withFields(""), &c)
		if seen[c.ID] {
			t.Fatalf("id %q repeated", c.ID)
		}
		seen[c.ID] = true
	}
}

func TestRequestErrors(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, method, path, body string
		status                   int
		param                    any
	}{
		{"invalid json", "POST", "/v1/chat/completions", `{"model":`, 400, nil},
		{"not an object", "POST", "/v1/chat/completions", `[1,2]`, 400, nil},
		{"empty body", "POST", "/v1/chat/completions", ``, 400, nil},
		{"no model", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "model"},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"m"}`, 400, "messages"},
		{"no prompt", "POST", "/v1/completions", `{"model":"m"}`, 400, "prompt"},
		{"no input", "POST", "/v1/embeddings", `{"model":"m"}`, 400, "input"},
		{"bad encoding", "POST", "/v1/embeddings", `{"model":"m","input":"a","encoding_format":"hex"}`, 400, "encoding_format"},
		{"bad dimensions", "POST", "/v1/embeddings", `{"model":"m","input":"a","dimensions":0}`, 400, "dimensions"},
		{"unknown path", "POST", "/v2/nothing", `{}`, 404, nil},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, ts.url+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := ts.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			e := decodeError(t, resp.Body)
			if e["param"] != tt.param {
				t.Errorf("param %v, want %v", e["param"], tt.param)
			}
		})
	}
}

// decodeError decodes an OpenAI error body and checks it has all four keys.
func decodeError(t *testing.T, r io.Reader) map[string]any {
	t.Helper()
	var body struct {
		Error map[string]any `json:"error"`
	}
	if err := json.NewDecoder(r).Decode(&body); err != nil {
		t.Fatalf("decode error body: %v", err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := body.Error[k]; !ok {
			t.Errorf("error body lacks %q: %v", k, body.Error)
		}
	}
	if m, _ := body.Error["message"].(string); m == "" {
		t.Errorf("empty message: %v", body.Error)
	}
	return body.Error
}

func TestInjectedStatus(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, path, body string
		headers          []string
		status           int
		retryAfter       string
		typ              string
	}{
		{"429 header", "/v1/chat/completions", withFields(""), []string{"X-Mock-Status", "429"}, 429, "1", "requests"},
		{"503 body", "/v1/chat/completions", withFields(`"mock":{"status":503}`), nil, 503, "1", "server_error"},
		{"500 stream", "/v1/chat/completions", withFields(`"stream":true,"mock":{"status":500}`), nil, 500, "", "server_error"},
		{"400 completions", "/v1/completions", `{"model":"m","prompt":"x"}`, []string{"X-Mock-Status", "400"}, 400, "", "invalid_request_error"},
		{"401 embeddings", "/v1/embeddings", `{"model":"m","input":"x"}`, []string{"X-Mock-Status", "401"}, 401, "", "invalid_request_error"},
		{"not an error status", "/v1/chat/completions", withFields(""), []string{"X-Mock-Status", "200"}, 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts.srv.ResetStats()
			resp := ts.post(t, tt.path, tt.body, tt.headers...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := resp.Header.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tt.retryAfter)
			}
			if tt.status == 200 {
				if n := ts.srv.Stats().FailuresInjected; n != 0 {
					t.Errorf("failures_injected %d", n)
				}
				return
			}
			if e := decodeError(t, resp.Body); e["type"] != tt.typ {
				t.Errorf("type %v, want %s", e["type"], tt.typ)
			}
			if n := ts.srv.Stats().FailuresInjected; n != 1 {
				t.Errorf("failures_injected %d, want 1", n)
			}
		})
	}
}

func TestLatency(t *testing.T) {
	ts := start(t, mockllm.Config{Latency: 150 * time.Millisecond})
	tests := []struct {
		name    string
		headers []string
		atLeast time.Duration
	}{
		{"config default", nil, 150 * time.Millisecond},
		{"header", []string{"X-Mock-Latency-Ms", "250"}, 250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			begin := time.Now()
			var c completion
			ts.postJSON(t, "/v1/chat/completions", withFields(""), &c, tt.headers...)
			if took := time.Since(begin); took < tt.atLeast {
				t.Errorf("answered after %v, want at least %v", took, tt.atLeast)
			}
		})
	}
}

func TestGarbage(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, path, body string
	}{
		{"chat", "/v1/chat/completions", withFields(`"mock":{"garbage":true}`)},
		{"completions", "/v1/completions", `{"model":"m","prompt":"x","mock":{"garbage":1}}`},
		{"embeddings", "/v1/embeddings", `{"model":"m","input":"x","mock":{"garbage":true}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, tt.path, tt.body)
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || len(raw) == 0 || json.Valid(raw) {
				t.Errorf("status %d body %q: want 200 with invalid JSON", resp.StatusCode, raw)
			}
		})
	}
}

func TestBehaviourPrecedence(t *testing.T) {
	ts := start(t, mockllm.Config{Chunks: 5})
	tests := []struct {
		name    string
		mock    string
		headers []string
		words   int
	}{
		{"config default", "", nil, 5},
		{"body chunks sets words", `"mock":{"chunks":2}`, nil, 2},
		{"body words", `"mock":{"chunks":2,"words":4}`, nil, 4},
		{"header over body", `"mock":{"words":4}`, []string{"X-Mock-Words", "6"}, 6},
		{"header chunks over body words default", `"mock":{"chunks":4}`, []string{"X-Mock-Chunks", "1"}, 1},
		{"bad header ignored", `"mock":{"words":3}`, []string{"X-Mock-Words", "lots"}, 3},
		{"zero words", `"mock":{"words":0}`, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c completion
			ts.postJSON(t, "/v1/chat/completions", withFields(tt.mock), &c, tt.headers...)
			if got := len(strings.Fields(*c.Choices[0].Message.Content)); got != tt.words {
				t.Errorf("%d words, want %d", got, tt.words)
			}
			if c.Usage.CompletionTokens != tt.words {
				t.Errorf("completion_tokens %d, want %d", c.Usage.CompletionTokens, tt.words)
			}
		})
	}
}

const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}},{"type":"function","function":{"name":"get_time"}}]`

func TestToolCallNonStream(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, choice, want string
	}{
		{"required calls the first tool", `"required"`, "get_weather"},
		{"object names the tool", `{"type":"function","function":{"name":"get_time"}}`, "get_time"},
		{"auto answers text", `"auto"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c completion
			ts.postJSON(t, "/v1/chat/completions", withFields(tools+`,"tool_choice":`+tt.choice+`,"mock":{"words":3}`), &c)
			ch := c.Choices[0]
			if tt.want == "" {
				if len(ch.Message.ToolCalls) != 0 || ch.FinishReason != "stop" {
					t.Fatalf("want a text answer, got %+v", ch)
				}
				return
			}
			if ch.FinishReason != "tool_calls" || ch.Message.Content != nil || len(ch.Message.ToolCalls) != 1 {
				t.Fatalf("want one tool call, got finish %q content %v calls %+v", ch.FinishReason, ch.Message.Content, ch.Message.ToolCalls)
			}
			call := ch.Message.ToolCalls[0]
			if !strings.HasPrefix(call.ID, "call_") || call.Type != "function" || call.Function.Name != tt.want {
				t.Errorf("call %+v", call)
			}
			var args map[string]string
			if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
				t.Fatalf("arguments %q: %v", call.Function.Arguments, err)
			}
			if args["input"] != "Tollgate mock answer" {
				t.Errorf("arguments %v", args)
			}
			if c.Usage.CompletionTokens != 3 {
				t.Errorf("usage %+v", c.Usage)
			}
		})
	}
}

func TestModels(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, path string
		list       bool
	}{
		{"list", "/v1/models", true},
		{"one", "/v1/models/any-model", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := ts.client.Get(ts.url + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var v struct {
				Object  string `json:"object"`
				ID      string `json:"id"`
				OwnedBy string `json:"owned_by"`
				Data    []struct {
					ID     string `json:"id"`
					Object string `json:"object"`
				} `json:"data"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
				t.Fatal(err)
			}
			if tt.list && (v.Object != "list" || len(v.Data) == 0 || v.Data[0].Object != "model") {
				t.Errorf("list %+v", v)
			}
			if !tt.list && (v.Object != "model" || v.ID != "any-model" || v.OwnedBy == "") {
				t.Errorf("model %+v", v)
			}
		})
	}
}

// TestServiceTierEcho: a request's service_tier flex or priority comes
// back next to the usage of the answer and of the stream's usage chunk;
// other tiers are not reported.
func TestServiceTierEcho(t *testing.T) {
	ts := start(t, mockllm.Config{})
	for _, tt := range []struct {
		name, tier, want string
		stream           bool
	}{
		{name: "flex", tier: "flex", want: `"service_tier":"flex","usage":{`},
		{name: "priority stream", tier: "priority", stream: true, want: `"choices":[],"service_tier":"priority","usage":{`},
		{name: "auto", tier: "auto"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","service_tier":"` + tt.tier + `","messages":[{"role":"user","content":"hi"}]`
			if tt.stream {
				body += `,"stream":true,"stream_options":{"include_usage":true}`
			}
			resp := ts.post(t, "/v1/chat/completions", body+"}")
			out, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if strings.Contains(string(out), "service_tier") {
					t.Errorf("service_tier reported for %q: %s", tt.tier, out)
				}
				return
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("answer lacks %s: %s", tt.want, out)
			}
		})
	}
}
