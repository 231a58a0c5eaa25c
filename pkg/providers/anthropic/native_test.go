package anthropic

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

func TestBuildNative(t *testing.T) {
	p := testProvider(t, "http://127.0.0.1:9")
	client := &fasthttp.RequestHeader{}
	client.Set("anthropic-version", "2023-01-01")
	client.Set("anthropic-beta", "interleaved-thinking-2025-05-14")
	client.Set("x-api-key", "client-key-must-not-pass")
	const body = `{"max_tokens":10, "model" : "opus" ,"messages":[{"role":"user","content":"hi"}]}`
	m := gjson.Get(body, "model")
	tests := []struct {
		name, model, wantBody, path string
		count                       bool
	}{
		{"renamed", "claude-opus-4-1-20250805", `{"max_tokens":10, "model" : "claude-opus-4-1-20250805" ,"messages":[{"role":"user","content":"hi"}]}`, "/v1/messages", false},
		{"same name", "opus", body, "/v1/messages", false},
		{"no rename", "", body, "/v1/messages", false},
		{"count tokens", "x\"y", `{"max_tokens":10, "model" : "x\"y" ,"messages":[{"role":"user","content":"hi"}]}`, "/v1/messages/count_tokens", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req fasthttp.Request
			build := p.BuildNative
			if tt.count {
				build = p.BuildCountTokens
			}
			if err := build(&req, []byte(body), tt.model, m.Raw, m.Index, client); err != nil {
				t.Fatal(err)
			}
			if got := string(req.Body()); got != tt.wantBody {
				t.Errorf("body %s, want %s", got, tt.wantBody)
			}
			if got := string(req.URI().Path()); got != tt.path {
				t.Errorf("path %s, want %s", got, tt.path)
			}
			for k, v := range map[string]string{"x-api-key": "sk-ant-test", "anthropic-version": "2023-01-01", "anthropic-beta": "interleaved-thinking-2025-05-14"} {
				if got := string(req.Header.Peek(k)); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
	t.Run("wrong offset", func(t *testing.T) {
		var req fasthttp.Request
		if err := p.BuildNative(&req, []byte(body), "x", m.Raw, m.Index+1, nil); err == nil {
			t.Errorf("accepted a wrong model offset")
		}
	})
	if CountTokensPath() != "/v1/messages/count_tokens" {
		t.Errorf("CountTokensPath = %s", CountTokensPath())
	}
}

func TestNativeStream(t *testing.T) {
	p := testProvider(t, "")
	for _, name := range []string{"text", "tool_use", "thinking"} {
		t.Run(name, func(t *testing.T) {
			in := readFile(t, filepath.Join("testdata", "stream", name+".sse"))
			s := p.NativeStream()
			defer s.Close()
			out, st, err := runStream(t, s, in)
			if err != nil || st != providers.Done || !s.Complete() {
				t.Fatalf("state %v err %v complete %v", st, err, s.Complete())
			}
			if string(out) != string(in) {
				t.Errorf("events changed:\n got %q\nwant %q", out, in)
			}
			want := map[string]providers.Usage{
				"text":     {Prompt: 35, Completion: 15, Cached: 10, Reported: true},
				"tool_use": {Prompt: 472, Completion: 89, CacheWrite: 450, Reported: true},
				"thinking": {Prompt: 12, Completion: 120, Cached: 3, Reported: true},
			}[name]
			if u := s.Usage(); u != want {
				t.Errorf("usage %+v, want %+v", u, want)
			}
		})
	}
	t.Run("error event", func(t *testing.T) {
		s := p.NativeStream()
		defer s.Close()
		out, st, err := s.Event(nil, []byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"))
		var ue *providers.UpstreamError
		if st != providers.Failed || !errors.As(err, &ue) || len(out) != 0 {
			t.Errorf("state %v err %v out %q", st, err, out)
		}
	})
}

// The usage of a native non-stream answer, read as the gateway reads it:
// the one scan of providers.ScanAnswer, then UsageOf.
func TestNativeUsage(t *testing.T) {
	tests := []struct {
		name, body string
		want       providers.Usage
		malformed  bool
	}{
		{"full", `{"type":"message","content":[],"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":7}}`, providers.Usage{Prompt: 115, Completion: 7, Cached: 100, CacheWrite: 5, Reported: true}, false},
		{"none", `{"type":"message","content":[]}`, providers.Usage{}, false},
		{"not JSON", `{`, providers.Usage{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := providers.ScanAnswer([]byte(tt.body), "content")
			if (err != nil) != tt.malformed {
				t.Fatalf("ScanAnswer error %v, want malformed %v", err, tt.malformed)
			}
			if got := UsageOf(a.Usage); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
