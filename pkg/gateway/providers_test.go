package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/config"
)

// TestProviderKindsEndToEnd serves the same OpenAI-format requests through
// every translating provider kind, each backed by the mock speaking that
// provider's wire format, over real sockets.
func TestProviderKindsEndToEnd(t *testing.T) {
	kinds := []struct {
		kind   string
		mutate func(p *config.Provider, mockURL string)
		embeds bool
	}{
		{"gemini", func(p *config.Provider, u string) { p.BaseURL = strings.TrimSuffix(u, "/v1") }, true},
		{"bedrock", func(p *config.Provider, u string) {
			p.BaseURL, p.Region, p.AccessKeyID, p.SecretAccessKey = strings.TrimSuffix(u, "/v1"), "us-east-1", "AKIDEXAMPLE", testProvKey
		}, false},
	}
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			r := newRig(t, nil)
			r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
				c.Providers[0].Kind = k.kind
				k.mutate(&c.Providers[0], c.Providers[0].BaseURL)
			})
			tok := r.token(nil)
			resp := r.post("/v1/chat/completions", tok, chatBody)
			body := readBody(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("non-stream: %d %s", resp.StatusCode, body)
			}
			var out struct {
				Object  string
				Choices []struct {
					Message struct{ Content string }
				}
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				}
			}
			if err := json.Unmarshal(body, &out); err != nil || out.Object != "chat.completion" || out.Choices[0].Message.Content == "" || out.Usage.CompletionTokens == 0 {
				t.Fatalf("non-stream answer (%v): %s", err, body)
			}
			resp = r.post("/v1/chat/completions", tok, `{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
			chunks, done := decodeChunks(t, readEvents(t, resp.Body))
			resp.Body.Close()
			if !done || len(chunks) < 2 || chunks[len(chunks)-1].Usage == nil {
				t.Fatalf("stream: done %v, %d chunks, last %+v", done, len(chunks), chunks[len(chunks)-1])
			}
			if k.embeds {
				resp = r.post("/v1/embeddings", tok, `{"model":"mock-embed","input":["a","b"],"dimensions":8}`)
				body = readBody(t, resp)
				if resp.StatusCode != 200 || !strings.Contains(string(body), `"embedding"`) {
					t.Fatalf("embeddings: %d %s", resp.StatusCode, body)
				}
			}
		})
	}
}
