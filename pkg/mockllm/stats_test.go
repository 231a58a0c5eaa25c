package mockllm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

func TestStats(t *testing.T) {
	ts := start(t, mockllm.Config{Chunks: 4})
	drain := func(resp *http.Response) {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	drain(ts.post(t, "/v1/chat/completions", withFields("")))                               // 11 + 4 tokens
	drain(ts.post(t, "/v1/chat/completions", withFields(`"stream":true`)))                  // 11 + 4 tokens
	drain(ts.post(t, "/v1/completions", `{"model":"m","prompt":"a b","mock":{"words":1}}`)) // 2 + 1 tokens
	drain(ts.post(t, "/v1/embeddings", `{"model":"m","input":["a","b c"]}`))                // 3 tokens
	drain(ts.post(t, "/v1/chat/completions", withFields(""), "X-Mock-Status", "429"))       // injected
	drain(ts.post(t, "/v1/chat/completions", `{"model":`))                                  // 400
	resp, err := ts.client.Get(ts.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	drain(resp)

	want := mockllm.Stats{
		Requests: 7, Chat: 4, Completions: 1, Embeddings: 1,
		StreamsStarted: 1, StreamsCompleted: 1, FailuresInjected: 1,
		PromptTokens:     2*chatPromptTokens + 2 + 3,
		CompletionTokens: 4 + 4 + 1,
	}
	overHTTP := want
	overHTTP.Requests++ // the GET /stats itself
	tests := []struct {
		name string
		get  func(t *testing.T) mockllm.Stats
		want mockllm.Stats
	}{
		{"method", func(t *testing.T) mockllm.Stats { return ts.srv.Stats() }, want},
		{"GET /stats", func(t *testing.T) mockllm.Stats { return ts.statsOver(t, http.MethodGet, "/stats") }, overHTTP},
		{"POST /stats/reset", func(t *testing.T) mockllm.Stats {
			ts.statsOver(t, http.MethodPost, "/stats/reset")
			return ts.srv.Stats()
		}, mockllm.Stats{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.get(t); got != tt.want {
				t.Errorf("stats\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// statsOver reads the counters through the HTTP endpoint.
func (ts *testServer) statsOver(t *testing.T, method, path string) mockllm.Stats {
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
	var keys map[string]int64
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"requests", "chat", "completions", "embeddings", "streams_started", "streams_completed", "streams_cancelled", "failures_injected", "prompt_tokens", "completion_tokens"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("stats lack %q: %s", k, raw)
		}
	}
	var st mockllm.Stats
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st
}
