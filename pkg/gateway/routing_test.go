package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/valyala/fasthttp"
)

// failingUpstream answers every request with status (and counts them).
func failingUpstream(t *testing.T, status int, body string, header ...string) (url string, calls *atomic.Int64) {
	calls = &atomic.Int64{}
	ln := listen(t)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		calls.Add(1)
		for i := 0; i+1 < len(header); i += 2 {
			ctx.Response.Header.Set(header[i], header[i+1])
		}
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(body)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1", calls
}

// secondMock starts another mock upstream, to tell targets apart.
func secondMock(t *testing.T) (*mockllm.Server, string) {
	m := mockllm.New(mockllm.Config{})
	ln := listen(t)
	go func() { _ = m.Serve(ln) }()
	t.Cleanup(func() { _ = m.Shutdown() })
	return m, "http://" + ln.Addr().String() + "/v1"
}

func addProvider(c *config.Config, name, url string) {
	p := c.Providers[0]
	p.Name, p.BaseURL, p.APIKey = name, url, "sk-"+name+"-key-0123456789"
	c.Providers = append(c.Providers, p)
}

func TestFallbackAfterUpstreamFailure(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		body        string
		headers     []string
		fallbackOn  []string
		wantStatus  int
		wantTries   string
		wantBadHits int64
	}{
		{"500 falls back", 500, `{"error":{"message":"boom"}}`, nil, nil, 200, "2", 1},
		{"429 falls back", 429, `{"error":{"message":"slow down"}}`, []string{"Retry-After", "1"}, nil, 200, "2", 1},
		{"quota falls back", 429, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}}`, nil, nil, 200, "2", 1},
		{"context length falls back", 400, `{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}`, nil, nil, 200, "2", 1},
		{"content policy does not fail over by default", 400, `{"error":{"message":"flagged by our content_policy","code":"content_policy_violation"}}`, nil, nil, 400, "1", 1},
		{"plain 400 never retried", 400, `{"error":{"message":"bad field"}}`, nil, nil, 400, "1", 1},
		{"500 not in fallback_on", 500, `{"error":{"message":"boom"}}`, nil, []string{"429"}, 502, "1", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			badURL, bad := failingUpstream(t, tc.status, tc.body, tc.headers...)
			r := newRig(t, nil)
			r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
				addProvider(c, "bad", badURL)
				c.Models = append(c.Models,
					config.Model{Name: "primary", Targets: []config.Target{{Provider: "bad", Model: "x"}}, Fallbacks: []string{"mock-gpt"}, FallbackOn: tc.fallbackOn})
				c.ApplyDefaults()
			})
			resp := r.post("/v1/chat/completions", r.token(nil), `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`)
			body := readBody(t, resp)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if got := resp.Header.Get("X-Tollgate-Attempts"); got != tc.wantTries {
				t.Errorf("attempts %q, want %s", got, tc.wantTries)
			}
			if bad.Load() != tc.wantBadHits {
				t.Errorf("failing target called %d times, want %d", bad.Load(), tc.wantBadHits)
			}
			if tc.wantStatus == 200 && resp.Header.Get("X-Tollgate-Provider") != "mock" {
				t.Errorf("served by %q", resp.Header.Get("X-Tollgate-Provider"))
			}
		})
	}
}

func TestConnectionRefusedFallsBackForStreams(t *testing.T) {
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		c.Models = append(c.Models, config.Model{Name: "primary", Targets: []config.Target{{Provider: "dead", Model: "x"}}, Fallbacks: []string{"mock-gpt"}})
		c.ApplyDefaults()
	})
	resp := r.post("/v1/chat/completions", r.token(nil), `{"model":"primary","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	chunks, done := decodeChunks(t, readEvents(t, resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 200 || !done || len(chunks) == 0 || resp.Header.Get("X-Tollgate-Attempts") != "2" {
		t.Fatalf("status %d done %v attempts %q", resp.StatusCode, done, resp.Header.Get("X-Tollgate-Attempts"))
	}
}

// TestStreamFailureAfterFirstByteIsNotRetried: once a chunk went out, a cut
// stream ends with an error event; it is never replayed on another target.
func TestStreamFailureAfterFirstByteIsNotRetried(t *testing.T) {
	other, otherURL := secondMock(t)
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		addProvider(c, "other", otherURL)
		c.Models = append(c.Models, config.Model{Name: "primary", Targets: []config.Target{{Provider: "mock", Model: "x"}}, Fallbacks: []string{"backup"}},
			config.Model{Name: "backup", Targets: []config.Target{{Provider: "other", Model: "y"}}})
		c.ApplyDefaults()
	})
	resp := r.post("/v1/chat/completions", r.token(nil), `{"model":"primary","stream":true,"messages":[{"role":"user","content":"hi"}],"mock":{"chunks":10,"cut_after":3}}`)
	chunks, done := decodeChunks(t, readEvents(t, resp.Body))
	resp.Body.Close()
	if done || chunks[len(chunks)-1].Error == nil || chunks[len(chunks)-1].Error.Code != "upstream_stream_cut" {
		t.Fatalf("want an error event after the cut, got done=%v last=%+v", done, chunks[len(chunks)-1])
	}
	if n := other.Stats().Requests; n != 0 {
		t.Errorf("the fallback was called %d times after the first byte", n)
	}
}

func TestRetrySameTargetHonoursRetryAfter(t *testing.T) {
	var calls atomic.Int64
	ln := listen(t)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if calls.Add(1) == 1 {
			ctx.Response.Header.Set("Retry-After", "1")
			ctx.SetStatusCode(429)
			ctx.SetBodyString(`{"error":{"message":"slow down"}}`)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(benchCompletion)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, "http://"+ln.Addr().String()+"/v1", func(c *config.Config) {
		c.Models[0].Retry = config.Retry{MaxAttempts: 2, BackoffBase: 10 * time.Millisecond, BackoffMax: 2 * time.Second, Deadline: 10 * time.Second}
		c.ApplyDefaults()
	})
	start := time.Now()
	resp := r.post("/v1/chat/completions", r.token(nil), chatBody)
	body := readBody(t, resp)
	if resp.StatusCode != 200 || calls.Load() != 2 || resp.Header.Get("X-Tollgate-Attempts") != "2" {
		t.Fatalf("status %d calls %d attempts %q: %s", resp.StatusCode, calls.Load(), resp.Header.Get("X-Tollgate-Attempts"), body)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("retried after %v, before the upstream's Retry-After of 1 s", waited)
	}
}

// TestNoRetryByDefault: without routing config a failure is answered as is.
func TestNoRetryByDefault(t *testing.T) {
	badURL, bad := failingUpstream(t, 500, `{"error":{"message":"boom"}}`)
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, badURL, nil)
	resp := r.post("/v1/chat/completions", r.token(nil), chatBody)
	readBody(t, resp)
	if resp.StatusCode != 502 || bad.Load() != 1 {
		t.Errorf("status %d after %d calls; want 502 after 1", resp.StatusCode, bad.Load())
	}
}

func TestCircuitOpensAndRecovers(t *testing.T) {
	badURL, bad := failingUpstream(t, 503, `{"error":{"message":"down"}}`)
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		addProvider(c, "bad", badURL)
		c.Models = append(c.Models, config.Model{Name: "primary", Targets: []config.Target{{Provider: "bad", Model: "x"}}, Fallbacks: []string{"mock-gpt"}})
		c.Routing.Circuit = config.Circuit{Failures: 3, Cooldown: 300 * time.Millisecond}
		c.ApplyDefaults()
	})
	tok := r.token(nil)
	for i := 0; i < 10; i++ {
		resp := r.post("/v1/chat/completions", tok, `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`)
		readBody(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if n := bad.Load(); n != 3 {
		t.Fatalf("the failing target got %d calls; its circuit should open after 3", n)
	}
	if view := mustJSON(t, r.gw.Routes().Targets); !strings.Contains(string(view), `"state":"open"`) {
		t.Errorf("no open circuit in the admin view: %s", view)
	}
	time.Sleep(350 * time.Millisecond) // cooldown: one half-open probe goes through
	readBody(t, r.post("/v1/chat/completions", tok, `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`))
	if n := bad.Load(); n != 4 {
		t.Errorf("after the cooldown the target got %d calls, want one probe (4)", n)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundRobinSpreadsLoad(t *testing.T) {
	other, otherURL := secondMock(t)
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		addProvider(c, "other", otherURL)
		c.Models = append(c.Models, config.Model{Name: "pair", Strategy: "round_robin",
			Targets: []config.Target{{Provider: "mock", Model: "a"}, {Provider: "other", Model: "b"}}})
		c.ApplyDefaults()
	})
	tok := r.token(nil)
	for i := 0; i < 40; i++ {
		readBody(t, r.post("/v1/chat/completions", tok, `{"model":"pair","messages":[{"role":"user","content":"hi"}]}`))
	}
	a, b := r.mock.Stats().Chat, other.Stats().Chat
	if a != 20 || b != 20 {
		t.Errorf("round robin split %d/%d, want 20/20", a, b)
	}
}

func TestWildcardPassesModelThrough(t *testing.T) {
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		c.Models = append(c.Models, config.Model{Name: "vendor/*", Targets: []config.Target{{Provider: "mock", Model: "*"}}})
		c.ApplyDefaults()
	})
	resp := r.post("/v1/chat/completions", r.token(nil), `{"model":"vendor/some-model","messages":[{"role":"user","content":"hi"}]}`)
	body := readBody(t, resp)
	var out struct{ Model string }
	_ = json.Unmarshal(body, &out)
	if resp.StatusCode != 200 || out.Model != "some-model" {
		t.Errorf("status %d, upstream saw model %q: %s", resp.StatusCode, out.Model, body)
	}
}

// TestMessagesFallback: /v1/messages routes like chat: a target failing
// before the first byte falls back, to an anthropic provider (native) or
// to any other kind (translated), non-stream and stream, with Anthropic
// errors when every target failed.
func TestMessagesFallback(t *testing.T) {
	badURL, bad := failingUpstream(t, 500, `{"error":{"message":"boom","type":"server_error"}}`)
	r := newRig(t, nil)
	r = newRigFor(t, r.mock, r.cfg.Providers[0].BaseURL, func(c *config.Config) {
		base := strings.TrimSuffix(c.Providers[0].BaseURL, "/v1")
		c.Providers = append(c.Providers, config.Provider{Name: "claude", Kind: config.KindAnthropic, BaseURL: base, APIKey: testProvKey,
			Timeouts: c.Providers[0].Timeouts})
		addProvider(c, "bad", badURL)
		c.Models = append(c.Models,
			config.Model{Name: "claude-mock", Targets: []config.Target{{Provider: "claude"}}},
			config.Model{Name: "to-native", Targets: []config.Target{{Provider: "bad", Model: "x"}}, Fallbacks: []string{"claude-mock"}},
			config.Model{Name: "to-translated", Targets: []config.Target{{Provider: "bad", Model: "x"}}, Fallbacks: []string{"mock-gpt"}},
			config.Model{Name: "no-fallback", Targets: []config.Target{{Provider: "bad", Model: "x"}}})
		c.ApplyDefaults()
	})
	tok := r.token(nil)
	tests := []struct {
		name, model  string
		stream       bool
		wantStatus   int
		wantProvider string
		wantAttempts string
		wantBadCalls int64
	}{
		{"native fallback", "to-native", false, 200, "claude", "2", 1},
		{"native fallback, stream", "to-native", true, 200, "claude", "2", 1},
		{"translated fallback", "to-translated", false, 200, "mock", "2", 1},
		{"translated fallback, stream", "to-translated", true, 200, "mock", "2", 1},
		{"no fallback left", "no-fallback", false, 502, "bad", "1", 1},
		{"no fallback left, stream", "no-fallback", true, 502, "bad", "1", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := bad.Load()
			body := `{"model":"` + tc.model + `","max_tokens":64,"stream":` + fmt.Sprint(tc.stream) + `,"messages":[{"role":"user","content":"hi"}]}`
			resp := r.post("/v1/messages", tok, body)
			got := readBody(t, resp)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, got)
			}
			if p, n := resp.Header.Get("X-Tollgate-Provider"), resp.Header.Get("X-Tollgate-Attempts"); p != tc.wantProvider || n != tc.wantAttempts {
				t.Errorf("provider %q attempts %q, want %q %q", p, n, tc.wantProvider, tc.wantAttempts)
			}
			if n := bad.Load() - before; n != tc.wantBadCalls {
				t.Errorf("failing target called %d times, want %d", n, tc.wantBadCalls)
			}
			switch {
			case tc.wantStatus != 200:
				var e struct {
					Type  string `json:"type"`
					Error struct{ Type, Message string }
				}
				if err := json.Unmarshal(got, &e); err != nil || e.Type != "error" || e.Error.Type != "api_error" || !strings.Contains(e.Error.Message, "boom") {
					t.Errorf("error body %s", got)
				}
			case tc.stream:
				if !strings.Contains(string(got), "event: message_start") || !strings.Contains(string(got), "event: message_stop") {
					t.Errorf("stream %s", got)
				}
			default:
				var msg struct {
					Type    string `json:"type"`
					Content []struct{ Text string }
				}
				if err := json.Unmarshal(got, &msg); err != nil || msg.Type != "message" || len(msg.Content) == 0 || msg.Content[0].Text == "" {
					t.Errorf("message %s", got)
				}
			}
		})
	}
}
