package mockllm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

func TestLedger(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		body    string
		headers []string
		want    mockllm.Ledger
	}{
		{"non-stream", "/v1/chat/completions", withFields(""), nil,
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{{Model: "gpt-test", PromptTokens: chatPromptTokens, CompletionTokens: 4, Count: 1}}}},
		{"stream with usage", "/v1/chat/completions", withFields(`"stream":true,"stream_options":{"include_usage":true}`), nil,
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{{Model: "gpt-test", PromptTokens: chatPromptTokens, CompletionTokens: 4, Count: 1}}}},
		{"stream without usage", "/v1/chat/completions", withFields(`"stream":true`), nil,
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}, WithoutUsage: 1}},
		{"no_usage", "/v1/chat/completions", withFields(""), []string{"X-Mock-No-Usage", "1"},
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}, WithoutUsage: 1}},
		{"injected status", "/v1/chat/completions", withFields(""), []string{"X-Mock-Status", "503"},
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}}},
		{"bad usage", "/v1/chat/completions", withFields(`"mock":{"bad_usage":true}`), nil,
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}, WithoutUsage: 1}},
		{"bad usage stream", "/v1/chat/completions", withFields(`"stream":true,"stream_options":{"include_usage":true},"mock":{"bad_usage":true}`), nil,
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}, WithoutUsage: 1}},
		{"refusal", "/v1/chat/completions", withFields(`"mock":{"refusal":true}`), nil,
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}}},
		{"context overflow", "/v1/chat/completions", withFields(""), []string{"X-Mock-Context-Overflow", "1"},
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}}},
		{"healthy cancels a status", "/v1/chat/completions", withFields(`"mock":{"status":503}`), []string{"X-Mock-Healthy", "1"},
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{{Model: "gpt-test", PromptTokens: chatPromptTokens, CompletionTokens: 4, Count: 1}}}},
		{"cut stream", "/v1/chat/completions", withFields(`"stream":true`), []string{"X-Mock-Cut-After", "2"},
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}, Incomplete: 1}},
		{"error event", "/v1/chat/completions", withFields(`"stream":true`), []string{"X-Mock-Error-Event-After", "1"},
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{}, Incomplete: 1}},
		{"embeddings", "/v1/embeddings", `{"model":"m-embed","input":["a","b c"]}`, nil,
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{{Model: "m-embed", PromptTokens: 3, Count: 1}}}},
		{"anthropic", "/v1/messages", `{"model":"claude-x","max_tokens":100,"messages":[{"role":"user","content":"a b"}]}`, nil,
			mockllm.Ledger{Answers: []mockllm.LedgerEntry{{Model: "claude-x", PromptTokens: 2 + 3, CompletionTokens: 4, Count: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := start(t, mockllm.Config{Chunks: 4}) // a server each: streams are accounted late
			resp := ts.post(t, tt.path, tt.body, tt.headers...)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			// A stream is accounted when fasthttp closes its body, which
			// may come just after the client read the end.
			deadline := time.Now().Add(5 * time.Second)
			got := ledgerOver(t, ts, http.MethodGet, "/ledger")
			for !reflect.DeepEqual(got, tt.want) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				got = ledgerOver(t, ts, http.MethodGet, "/ledger")
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ledger\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	t.Run("two answers of one group, reset", func(t *testing.T) {
		ts := start(t, mockllm.Config{Chunks: 4})
		for range 2 {
			resp := ts.post(t, "/v1/chat/completions", withFields(""))
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if got := ts.srv.Ledger(); len(got.Answers) != 1 || got.Answers[0].Count != 2 {
			t.Errorf("ledger %+v, want one group of 2", got)
		}
		if got := ledgerOver(t, ts, http.MethodPost, "/ledger/reset"); len(got.Answers) != 0 {
			t.Errorf("after reset %+v", got)
		}
	})
}

// ledgerOver reads the ledger through the HTTP endpoint.
func ledgerOver(t *testing.T, ts *testServer, method, path string) mockllm.Ledger {
	t.Helper()
	req, err := http.NewRequest(method, ts.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s %v", method, path, resp.StatusCode, raw, err)
	}
	var l mockllm.Ledger
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatal(err)
	}
	return l
}
