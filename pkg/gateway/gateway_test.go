package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

const chatBody = `{"model":"mock-gpt","messages":[{"role":"user","content":"Say hello to the gateway"}]}`

// mockChat is a chat request carrying mock upstream behaviour in its body
// (the gateway forwards bodies, not X-Mock-* headers).
func mockChat(stream bool, mock string) string {
	s := "false"
	if stream {
		s = "true"
	}
	return `{"model":"mock-gpt","stream":` + s + `,"messages":[{"role":"user","content":"x"}],"mock":` + mock + `}`
}

func TestChatNonStream(t *testing.T) {
	r := newRig(t, nil)
	resp := r.post("/v1/chat/completions", r.token(nil), chatBody, "X-Request-Id", "client-req-1")
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	id := resp.Header.Get("X-Request-Id")
	if !strings.HasPrefix(id, "req_") || len(id) != 36 {
		t.Errorf("x-request-id = %q, want the gateway's own", id)
	}
	if got := resp.Header.Get("X-Client-Request-Id"); got != "client-req-1" {
		t.Errorf("x-client-request-id = %q, want the client's x-request-id", got)
	}
	if got := resp.Header.Get("X-Tollgate-Provider"); got != "mock" {
		t.Errorf("x-tollgate-provider = %q", got)
	}
	var out struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Object != "chat.completion" || out.Model != "mock-gpt" || len(out.Choices) != 1 ||
		out.Choices[0].Message.Content == "" || out.Choices[0].FinishReason != "stop" || out.Usage.CompletionTokens == 0 {
		t.Errorf("unexpected completion: %s", body)
	}
	if d := time.Since(time.Unix(out.Created, 0)); d < 0 || d > time.Minute {
		t.Errorf("created %d is not unix seconds of now", out.Created)
	}
	if !strings.Contains(r.logs.String(), `"request_id":"`+id+`"`) {
		t.Errorf("request log line missing: %s", r.logs.String())
	}
}

func TestRequestIDGenerated(t *testing.T) {
	r := newRig(t, nil)
	for _, tc := range []struct{ name, in string }{{"absent", ""}, {"unsafe", "bad id"}, {"too long", strings.Repeat("x", 200)}} {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			if tc.in != "" {
				h = []string{"X-Request-Id", tc.in}
			}
			resp := r.post("/v1/chat/completions", "", chatBody, h...)
			readBody(t, resp)
			if got := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") || len(got) != 36 {
				t.Errorf("generated x-request-id = %q", got)
			}
			if got := resp.Header.Get("X-Client-Request-Id"); got != "" {
				t.Errorf("x-client-request-id = %q for a client id that is not sane", got)
			}
		})
	}
}

func TestModelRenamedForUpstream(t *testing.T) {
	r := newRig(t, nil)
	resp := r.post("/v1/chat/completions", r.token(nil), `{"model":"alias-gpt","messages":[{"role":"user","content":"hi"}]}`)
	body := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var out struct{ Model string }
	_ = json.Unmarshal(body, &out)
	// The mock echoes the model it was asked for: the upstream's name.
	if out.Model != "upstream-gpt" {
		t.Errorf("upstream saw model %q, want upstream-gpt", out.Model)
	}
}

func TestEmbeddings(t *testing.T) {
	r := newRig(t, nil)
	resp := r.post("/v1/embeddings", r.token(nil), `{"model":"mock-embed","input":["a b","c"],"dimensions":8,"encoding_format":"base64"}`)
	body := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var out struct {
		Data []struct {
			Embedding string `json:"embedding"`
		}
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Data) != 2 || len(out.Data[0].Embedding) == 0 {
		t.Fatalf("bad embeddings answer (%v): %s", err, body)
	}
}

func TestModelsListFollowsToken(t *testing.T) {
	r := newRig(t, nil)
	req, _ := http.NewRequest(http.MethodGet, r.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+r.token(func(o *auth.MintOptions) { o.Models = []string{"mock-*"} }))
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp)
	var out struct {
		Object string
		Data   []struct{ ID string }
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range out.Data {
		ids = append(ids, d.ID)
	}
	if got := strings.Join(ids, ","); got != "mock-embed,mock-gpt" {
		t.Errorf("models = %s, want mock-embed,mock-gpt", got)
	}
}

func TestHealthAndReady(t *testing.T) {
	r := newRig(t, nil)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := httpClient.Get(r.url + path)
		if err != nil {
			t.Fatal(err)
		}
		if b := readBody(t, resp); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
}

func TestErrors(t *testing.T) {
	r := newRig(t, nil)
	good := r.token(nil)
	onlyEmbed := r.token(func(o *auth.MintOptions) { o.Models = []string{"mock-embed"} })
	tests := []struct {
		name       string
		path       string
		token      string
		body       string
		headers    []string
		status     int
		typ, code  string
		retryAfter string
	}{
		{"malformed json", "/v1/chat/completions", good, `{"model":"mock-gpt",`, nil, 400, typeInvalidRequest, "invalid_json", ""},
		{"empty body", "/v1/chat/completions", good, ``, nil, 400, typeInvalidRequest, "invalid_json", ""},
		{"body not an object", "/v1/chat/completions", good, `[1,2]`, nil, 400, typeInvalidRequest, "invalid_json", ""},
		{"missing model", "/v1/chat/completions", good, `{"messages":[{"role":"user","content":"x"}]}`, nil, 400, typeInvalidRequest, "missing_field", ""},
		{"model not a string", "/v1/chat/completions", good, `{"model":7,"messages":[{"role":"user","content":"x"}]}`, nil, 400, typeInvalidRequest, "invalid_type", ""},
		{"duplicate model", "/v1/chat/completions", good, `{"model":"mock-gpt","messages":[{"role":"user","content":"x"}],"model":"alias-gpt"}`, nil, 400, typeInvalidRequest, "duplicate_key", ""},
		{"missing messages", "/v1/chat/completions", good, `{"model":"mock-gpt"}`, nil, 400, typeInvalidRequest, "missing_field", ""},
		{"empty messages", "/v1/chat/completions", good, `{"model":"mock-gpt","messages":[]}`, nil, 400, typeInvalidRequest, "missing_field", ""},
		{"missing prompt", "/v1/completions", good, `{"model":"mock-gpt"}`, nil, 400, typeInvalidRequest, "missing_field", ""},
		{"missing input", "/v1/embeddings", good, `{"model":"mock-embed"}`, nil, 400, typeInvalidRequest, "missing_field", ""},
		{"embeddings model on chat", "/v1/chat/completions", good, `{"model":"mock-embed","messages":[{"role":"user","content":"x"}]}`, nil, 400, typeInvalidRequest, "wrong_endpoint", ""},
		{"no token", "/v1/chat/completions", "", chatBody, nil, 401, typeAuthentication, "missing_token", ""},
		{"bad token", "/v1/chat/completions", "not.a.jwt", chatBody, nil, 401, typeAuthentication, "invalid_token", ""},
		{"model not allowed", "/v1/chat/completions", onlyEmbed, chatBody, nil, 403, typePermission, "model_not_allowed", ""},
		{"unknown model before allow-list", "/v1/chat/completions", onlyEmbed, `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, nil, 404, typeInvalidRequest, "model_not_found", ""},
		{"deeply nested", "/v1/chat/completions", good, `{"model":"mock-gpt","messages":[{"role":"user","content":"x"}],"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, nil, 400, typeInvalidRequest, "invalid_json", ""},
		{"body too large", "/v1/chat/completions", good, `{"model":"mock-gpt","messages":[{"role":"user","content":"` + strings.Repeat("x", 70000) + `"}]}`, nil, 413, typeInvalidRequest, "request_too_large", ""},
		{"unknown url", "/v1/nothing", good, `{}`, nil, 404, typeNotFound, "unknown_url", ""},
		{"provider key missing", "/v1/chat/completions", good, `{"model":"keyless","messages":[{"role":"user","content":"x"}]}`, nil, 503, typeUnavailable, "provider_not_configured", ""},
		{"upstream refused", "/v1/chat/completions", good, `{"model":"dead-gpt","messages":[{"role":"user","content":"x"}]}`, nil, 502, typeUpstream, "upstream_unreachable", ""},
		{"upstream 500", "/v1/chat/completions", good, mockChat(false, `{"status":500}`), nil, 502, typeUpstream, "upstream_error", ""},
		{"upstream 503", "/v1/chat/completions", good, mockChat(false, `{"status":503}`), nil, 503, typeUnavailable, "upstream_unavailable", ""},
		{"upstream 429", "/v1/chat/completions", good, mockChat(false, `{"status":429}`), nil, 429, typeRateLimit, "upstream_rate_limited", "1"},
		{"upstream 401", "/v1/chat/completions", good, mockChat(false, `{"status":401}`), nil, 502, typeUpstream, "upstream_auth_failed", ""},
		{"upstream 400", "/v1/chat/completions", good, mockChat(false, `{"status":400}`), nil, 400, typeInvalidRequest, "upstream_rejected", ""},
		{"upstream garbage", "/v1/chat/completions", good, mockChat(false, `{"garbage":true}`), nil, 502, typeUpstream, "upstream_malformed", ""},
		{"upstream too slow", "/v1/chat/completions", good, mockChat(false, `{"latency_ms":3500}`), nil, 504, typeTimeout, "upstream_timeout", ""},
		{"stream first byte too slow", "/v1/chat/completions", good, mockChat(true, `{"latency_ms":3500}`), nil, 504, typeTimeout, "upstream_timeout", ""},
		{"stream upstream 500", "/v1/chat/completions", good, mockChat(true, `{"status":500}`), nil, 502, typeUpstream, "upstream_error", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := r.post(tc.path, tc.token, tc.body, tc.headers...)
			body := readBody(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type = %q", ct)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no x-request-id on an error")
			}
			errorShape(t, body, tc.typ, tc.code)
			if got := resp.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("retry-after = %q, want %q", got, tc.retryAfter)
			}
			if tc.status >= 400 && tc.status < 500 && tc.status != 429 && resp.Header.Get("X-Should-Retry") != "false" {
				t.Errorf("a %d must tell clients not to retry", tc.status)
			}
			if strings.Contains(string(body), testProvKey) {
				t.Errorf("provider key leaked: %s", body)
			}
		})
	}
	if strings.Contains(r.logs.String(), testProvKey) {
		t.Error("provider key leaked into the logs")
	}
}

// TestProviderKeyNeverLeaks runs an upstream that echoes the credentials it
// received in its error messages, as real providers partly do.
func TestProviderKeyNeverLeaks(t *testing.T) {
	ln := listen(t)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		key := string(ctx.Request.Header.Peek("Authorization"))
		status := 400
		if string(ctx.Request.Header.Peek("X-Echo-Status")) == "401" {
			status = 401
		}
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"error":{"message":"Incorrect API key provided: ` + key + `","type":"invalid_request_error"}}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	r := newRigFor(t, nil, "http://"+ln.Addr().String()+"/v1", nil)
	tok := r.token(nil)
	for _, status := range []string{"400", "401"} {
		for _, stream := range []string{"false", "true"} {
			resp := r.post("/v1/chat/completions", tok, `{"model":"mock-gpt","stream":`+stream+`,"messages":[{"role":"user","content":"x"}]}`, "X-Echo-Status", status)
			body := readBody(t, resp)
			if strings.Contains(string(body), testProvKey) {
				t.Errorf("status %s stream %s: key leaked: %s", status, stream, body)
			}
			if resp.StatusCode < 400 {
				t.Errorf("status %s: got %d", status, resp.StatusCode)
			}
		}
	}
	if strings.Contains(r.logs.String(), testProvKey) {
		t.Error("provider key leaked into the logs")
	}
}

func TestJWTAttacksOverHTTP(t *testing.T) {
	r := newRig(t, nil)
	valid := r.token(nil)
	parts := strings.Split(valid, ".")
	tests := []struct{ name, token string }{
		{"alg none", noneToken(t)},
		{"expired", r.tokenAt(time.Now().Add(-2*time.Hour), nil)},
		{"not yet valid", r.tokenAt(time.Now().Add(time.Hour), nil)},
		{"wrong audience", r.token(func(o *auth.MintOptions) { o.Audience = "someone-else" })},
		{"wrong issuer", r.token(func(o *auth.MintOptions) { o.Issuer = "evil" })},
		{"bad signature", parts[0] + "." + parts[1] + ".AAAA" + parts[2][4:]},
		{"tampered payload", parts[0] + "." + parts[1] + "x." + parts[2]},
		{"unknown kid", r.token(func(o *auth.MintOptions) { o.KID = "k9" })},
		{"wrong secret", r.token(func(o *auth.MintOptions) { o.Key = []byte("another-secret-of-sufficient-length-000") })},
		{"garbage", "%%%garbage%%%"},
		{"two parts", parts[0] + "." + parts[1]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := r.post("/v1/chat/completions", tc.token, chatBody)
			body := readBody(t, resp)
			if resp.StatusCode != 401 {
				t.Fatalf("status = %d, want 401: %s", resp.StatusCode, body)
			}
			errorShape(t, body, typeAuthentication, "invalid_token")
		})
	}
}

// noneToken builds an unsigned token claiming alg "none".
func noneToken(t *testing.T) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return strings.TrimRight(b64url(b), "=")
	}
	return enc(map[string]any{"alg": "none", "typ": "JWT"}) + "." +
		enc(map[string]any{"iss": testIssuer, "aud": testAudience, "sub": "mallory", "exp": time.Now().Add(time.Hour).Unix()}) + "."
}

func TestGracefulShutdownFinishesStreams(t *testing.T) {
	r := newRig(t, nil)
	resp := r.post("/v1/chat/completions", r.token(nil),
		`{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"x"}],"mock":{"chunks":10,"chunk_delay_ms":50}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- r.gw.Shutdown(ctx)
	}()
	events := readEvents(t, resp.Body)
	resp.Body.Close()
	if len(events) == 0 || events[len(events)-1].data != "[DONE]" {
		t.Fatalf("stream did not finish during shutdown: %d events", len(events))
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// New connections are refused once shut down.
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(r.url, "http://"), time.Second); err == nil {
		c.Close()
		t.Error("gateway still accepts connections after shutdown")
	}
}

func TestReadyzDuringDrain(t *testing.T) {
	r := newRig(t, nil)
	r.gw.draining.Store(true)
	resp, err := httpClient.Get(r.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readyz while draining = %d, want 503", resp.StatusCode)
	}
}

func TestConfigRejectsBadProvider(t *testing.T) {
	cfg := &config.Config{Providers: []config.Provider{{Name: "x", Kind: "openai", BaseURL: "ftp://x"}}}
	if _, err := New(Options{Config: cfg, Verifier: &auth.Verifier{}}); err == nil {
		t.Error("New accepted an ftp base URL")
	}
}

func TestShallowJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"flat", `{"a":[1,2,{"b":3}]}`, true},
		{"at the limit", strings.Repeat("[", 128) + strings.Repeat("]", 128), true},
		{"over the limit", strings.Repeat("[", 129) + strings.Repeat("]", 129), false},
		{"brackets in strings", `{"a":"` + strings.Repeat("[", 500) + `"}`, true},
		{"escaped quote in string", `{"a":"\"` + strings.Repeat("{", 500) + `"}`, true},
		{"hostile 8 MB", strings.Repeat("[", 8<<20), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := providers.Shallow([]byte(tc.in), providers.MaxJSONDepth); got != tc.ok {
				t.Errorf("shallowJSON = %v, want %v", got, tc.ok)
			}
		})
	}
}
