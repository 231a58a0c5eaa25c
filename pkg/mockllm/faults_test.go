package mockllm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// TestRejections: refusals and context overflows are 400s with the codes
// and messages OpenAI sends, and healthy cancels them.
func TestRejections(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name    string
		mock    string
		headers []string
		status  int
		code    string
		message string
	}{
		{"refusal", `"mock":{"refusal":true}`, nil, 400, "content_policy_violation", "safety system"},
		{"refusal stream", `"stream":true,"mock":{"refusal":1}`, nil, 400, "content_policy_violation", "safety system"},
		{"context overflow", "", []string{"X-Mock-Context-Overflow", "1"}, 400, "context_length_exceeded",
			fmt.Sprintf("maximum context length is %d tokens. However, your messages resulted in %d tokens", chatPromptTokens-1, chatPromptTokens)},
		{"healthy header wins", `"mock":{"refusal":true,"status":429}`, []string{"X-Mock-Healthy", "1"}, 200, "", ""},
		{"healthy in the body", `"mock":{"context_overflow":true,"healthy":true}`, nil, 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, "/v1/chat/completions", withFields(tt.mock), tt.headers...)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status == http.StatusOK {
				return
			}
			var e struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("error body %s: %v", body, err)
			}
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := e.Error[k]; !ok {
					t.Errorf("error lacks %q: %s", k, body)
				}
			}
			if e.Error["code"] != tt.code || !strings.Contains(fmt.Sprint(e.Error["message"]), tt.message) {
				t.Errorf("error %s, want code %s and message with %q", body, tt.code, tt.message)
			}
		})
	}
}

// TestBadUsage: bad_usage replaces the counts by values no parser should
// accept, in non-stream answers and in the usage chunk.
func TestBadUsage(t *testing.T) {
	ts := start(t, mockllm.Config{})
	const want = `"usage":{"prompt_tokens":-1,"completion_tokens":"many","total_tokens":null}`
	tests := []struct {
		name, path, body string
	}{
		{"chat", "/v1/chat/completions", withFields(`"mock":{"bad_usage":true}`)},
		{"completions", "/v1/completions", `{"model":"m","prompt":"say hi","mock":{"bad_usage":true}}`},
		{"chat stream", "/v1/chat/completions", withFields(`"stream":true,"stream_options":{"include_usage":true},"mock":{"bad_usage":true}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, tt.path, tt.body)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || strings.Count(string(body), want) != 1 {
				t.Errorf("status %d, body %s; want one %s", resp.StatusCode, body, want)
			}
			if strings.Contains(tt.name, "stream") && !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				t.Errorf("stream does not end with [DONE]: %s", body)
			}
		})
	}
}

// TestErrorEventStatus: the mid-stream error event carries the error of
// the status asked for.
func TestErrorEventStatus(t *testing.T) {
	ts := start(t, mockllm.Config{})
	tests := []struct {
		name, mock, want string
	}{
		{"default", `"mock":{"error_event_after":1}`, `{"error":{"message":"mock: injected stream error","type":"server_error","param":null,"code":null}}`},
		{"429", `"mock":{"error_event_after":1,"error_event_status":429}`, `{"error":{"message":"mock: injected stream error (HTTP 429)","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
		{"529", `"mock":{"error_event_after":1,"error_event_status":529}`, `{"error":{"message":"mock: injected stream error (HTTP 529)","type":"overloaded_error","param":null,"code":"overloaded"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.post(t, "/v1/chat/completions", withFields(`"stream":true,`+tt.mock))
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if len(events) != 3 || events[2].data != tt.want {
				t.Errorf("events %v, want role, one chunk and %s", events, tt.want)
			}
			var v any
			if err := json.Unmarshal([]byte(events[len(events)-1].data), &v); err != nil {
				t.Errorf("error event is not JSON: %v", err)
			}
		})
	}
}
