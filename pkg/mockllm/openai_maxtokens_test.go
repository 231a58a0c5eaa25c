package mockllm

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestMaxTokensCapsTheAnswer: like a real model, the mock never generates
// more than max_tokens (or max_completion_tokens) words.
func TestMaxTokensCapsTheAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Chunks: 20})
	go func() { _ = s.Serve(ln) }()
	defer s.Shutdown()
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"max_tokens", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, 5},
		{"max_completion_tokens", `{"model":"m","max_completion_tokens":3,"messages":[{"role":"user","content":"x"}]}`, 3},
		{"above the default", `{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"x"}]}`, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + ln.Addr().String() + "/v1/chat/completions")
			req.Header.SetMethod("POST")
			req.SetBodyString(tc.body)
			if err := fasthttp.Do(req, resp); err != nil {
				t.Fatal(err)
			}
			var out struct {
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(resp.Body(), &out); err != nil {
				t.Fatal(err)
			}
			if out.Usage.CompletionTokens != tc.want {
				t.Errorf("completion tokens = %d, want %d", out.Usage.CompletionTokens, tc.want)
			}
		})
	}
}
