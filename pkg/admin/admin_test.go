package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

const (
	testSecret   = "admin-test-secret-0123456789abcdef"
	providerKey  = "sk-live-provider-key-42"
	natsPassword = "nats-pass-77"
	natsToken    = "nats-token-88"
	headerBearer = "hdr-bearer-101"
	headerAPIKey = "hdr-azure-key-102"
	heliconeKey  = "sk-helicone-103"
	customHeader = "hdr-custom-104"
	queryKey     = "query-key-105"
	querySig     = "query-sig-106"
)

// secrets are the credentials of testConfigYAML; none may be shown.
var secrets = []string{testSecret, providerKey, natsPassword, natsToken, headerBearer, headerAPIKey,
	heliconeKey, customHeader, queryKey, querySig}

// testConfigYAML is a valid config holding secrets in every place Redact
// must hide them.
const testConfigYAML = `
listen: 127.0.0.1:8080
auth:
  issuers:
    - name: corp
      issuer: https://corp.test
      algorithms: [HS256]
      keys:
        - kid: k1
          secret: ` + testSecret + `
    - name: pub
      issuer: https://pub.test
      algorithms: [EdDSA]
      keys:
        - public_key_file: /etc/tollgate/ed.pem
providers:
  - name: openai
    kind: openai
    base_url: https://api.openai.com/v1
    api_key: ` + providerKey + `
  - name: proxy
    kind: openai
    base_url: https://proxy.example/v1?api-key=` + queryKey + `&sig=` + querySig + `
    headers:
      Authorization: Bearer ` + headerBearer + `
      api-key: ` + headerAPIKey + `
      Helicone-Auth: Bearer ` + heliconeKey + `
      X-Team-Route: ` + customHeader + `
models:
  - name: gpt-4o-mini
    targets:
      - provider: openai
nats:
  url: nats://tollgate:` + natsPassword + `@nats-0:4222,nats://` + natsToken + `@nats-1:4222
  creds_file: /etc/nats/tollgate.creds
`

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(testConfigYAML), nil)
	if err != nil {
		t.Fatalf("parse test config: %v", err)
	}
	return c
}

// token mints a token of the corp issuer.
func token(t *testing.T, admin bool) string {
	t.Helper()
	tok, err := auth.Mint(auth.MintOptions{Issuer: "https://corp.test", Subject: "ops", Admin: admin,
		KID: "k1", Key: []byte(testSecret), TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatalf("mint: %v", err)
	}
	return tok
}

// start serves a Server for o on a loopback port and returns its base URL.
func start(t *testing.T, o Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(o)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url, bearer string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(body)}
}

// errorType decodes an error body and returns its type, failing the test
// when the body is not the JSON error shape.
func errorType(t *testing.T, r response) string {
	t.Helper()
	var b errorBody
	if err := json.Unmarshal([]byte(r.body), &b); err != nil || b.Error.Message == "" || b.Error.Type == "" {
		t.Fatalf("body %q is not a JSON error (%v)", r.body, err)
	}
	return b.Error.Type
}

func fullOptions(t *testing.T) Options {
	t.Helper()
	// Only the HMAC issuer: the other one names a key file that does not exist.
	a := testConfig(t).Auth
	a.Issuers = a.Issuers[:1]
	v, err := auth.NewVerifier(a, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	return Options{
		Gatherer: prometheus.NewRegistry(),
		Verify:   v.Verify,
		Config:   func() *config.Config { return cfg },
		Routes:   func() any { return []map[string]any{{"model": "gpt-4o-mini", "target": "openai", "circuit": "closed"}} },
		Budgets:  func() any { return map[string]float64{"dept/eng/month": 0.5} },
		Reload:   func(context.Context) (any, error) { return map[string]int{"models": 1}, nil },
		Keys:     keyStoreFor(t, nil),
	}
}

func TestAccess(t *testing.T) {
	const (
		none = iota
		garbage
		user
		admin
	)
	tests := []struct {
		name       string
		require    bool
		noVerifier bool
		method     string
		path       string
		tok        int
		want       int
		wantType   string
	}{
		{name: "loopback: config without token", path: "/admin/config", want: 200},
		{name: "loopback: pprof without token", path: "/debug/pprof/", want: 200},
		{name: "loopback: reload without token", method: "POST", path: "/admin/reload", want: 200},
		{name: "loopback: a bad token is not even looked at", path: "/admin/routes", tok: garbage, want: 200},
		{name: "token: config without token", require: true, path: "/admin/config", want: 401, wantType: "unauthorized"},
		{name: "token: config with a bad token", require: true, path: "/admin/config", tok: garbage, want: 401, wantType: "unauthorized"},
		{name: "token: config without admin claim", require: true, path: "/admin/config", tok: user, want: 403, wantType: "forbidden"},
		{name: "token: config with admin claim", require: true, path: "/admin/config", tok: admin, want: 200},
		{name: "token: routes without admin claim", require: true, path: "/admin/routes", tok: user, want: 403, wantType: "forbidden"},
		{name: "token: budgets with admin claim", require: true, path: "/admin/budgets", tok: admin, want: 200},
		{name: "token: reload without token", require: true, method: "POST", path: "/admin/reload", want: 401, wantType: "unauthorized"},
		{name: "token: reload without admin claim", require: true, method: "POST", path: "/admin/reload", tok: user, want: 403, wantType: "forbidden"},
		{name: "token: reload with admin claim", require: true, method: "POST", path: "/admin/reload", tok: admin, want: 200},
		{name: "token: pprof index without token", require: true, path: "/debug/pprof/", want: 401, wantType: "unauthorized"},
		{name: "token: pprof heap without admin claim", require: true, path: "/debug/pprof/heap", tok: user, want: 403, wantType: "forbidden"},
		{name: "token: pprof cmdline with admin claim", require: true, path: "/debug/pprof/cmdline", tok: admin, want: 200},
		{name: "token: unknown debug path without token", require: true, path: "/debug/vars", want: 401, wantType: "unauthorized"},
		{name: "token: unknown admin path without token", require: true, path: "/admin/users", want: 401, wantType: "unauthorized"},
		{name: "token: unknown admin path with admin claim", require: true, path: "/admin/users", tok: admin, want: 404, wantType: "not_found"},
		{name: "token: healthz stays open", require: true, path: "/healthz", want: 200},
		{name: "token: readyz stays open", require: true, path: "/readyz", want: 200},
		{name: "token: metrics stays open", require: true, path: "/metrics", want: 200},
		{name: "token: no verifier refuses admin tokens", require: true, noVerifier: true, path: "/admin/config", tok: admin, want: 403, wantType: "forbidden"},
		{name: "token: no verifier keeps probes open", require: true, noVerifier: true, path: "/healthz", want: 200},
		{name: "unknown top-level path", path: "/nope", want: 404, wantType: "not_found"},
		{name: "POST healthz", method: "POST", path: "/healthz", want: 405, wantType: "method_not_allowed"},
		{name: "GET reload", path: "/admin/reload", want: 405, wantType: "method_not_allowed"},
		{name: "DELETE config", method: "DELETE", path: "/admin/config", want: 405, wantType: "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := fullOptions(t)
			o.RequireToken = tt.require
			if tt.noVerifier {
				o.Verify = nil
			}
			base := start(t, o)
			var bearer string
			switch tt.tok {
			case garbage:
				bearer = "not.a.jwt"
			case user:
				bearer = token(t, false)
			case admin:
				bearer = token(t, true)
			}
			method := tt.method
			if method == "" {
				method = "GET"
			}
			r := do(t, method, base+tt.path, bearer)
			if r.status != tt.want {
				t.Fatalf("status %d, want %d; body %s", r.status, tt.want, r.body)
			}
			if tt.wantType != "" {
				if got := errorType(t, r); got != tt.wantType {
					t.Errorf("error type %q, want %q", got, tt.wantType)
				}
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
			}
			if tt.want == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without a Bearer WWW-Authenticate challenge: %q", r.header.Get("WWW-Authenticate"))
			}
		})
	}
}

func TestConfigRedacted(t *testing.T) {
	var current atomic.Pointer[config.Config]
	current.Store(testConfig(t))
	o := fullOptions(t)
	o.Config = current.Load
	base := start(t, o)

	r := do(t, "GET", base+"/admin/config", "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	for _, secret := range secrets {
		if strings.Contains(r.body, secret) {
			t.Errorf("config shows the secret %q", secret)
		}
	}
	var got struct {
		Listen        string `json:"listen"`
		ShutdownGrace string `json:"shutdown_grace"`
		Providers     []struct {
			APIKey  string            `json:"api_key"`
			BaseURL string            `json:"base_url"`
			Headers map[string]string `json:"headers"`
		} `json:"providers"`
		Auth struct {
			Issuers []struct {
				Keys []struct {
					KID           string `json:"kid"`
					Secret        string `json:"secret"`
					PublicKeyFile string `json:"public_key_file"`
				} `json:"keys"`
			} `json:"issuers"`
		} `json:"auth"`
		NATS struct {
			URL       string `json:"url"`
			CredsFile string `json:"creds_file"`
		} `json:"nats"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	tests := []struct {
		name, got, want string
	}{
		{"listen shown", got.Listen, "127.0.0.1:8080"},
		{"durations as text", got.ShutdownGrace, "30s"},
		{"api_key redacted", got.Providers[0].APIKey, Redacted},
		{"base_url shown", got.Providers[0].BaseURL, "https://api.openai.com/v1"},
		{"kid shown", got.Auth.Issuers[0].Keys[0].KID, "k1"},
		{"issuer secret redacted", got.Auth.Issuers[0].Keys[0].Secret, Redacted},
		{"empty secret stays empty", got.Auth.Issuers[1].Keys[0].Secret, ""},
		{"key file path shown", got.Auth.Issuers[1].Keys[0].PublicKeyFile, "/etc/tollgate/ed.pem"},
		{"nats url password and token masked", got.NATS.URL, "nats://tollgate:xxxxx@nats-0:4222,nats://[redacted]@nats-1:4222"},
		{"base_url query values redacted", got.Providers[1].BaseURL, "https://proxy.example/v1?api-key=[redacted]&sig=[redacted]"},
		{"Authorization header redacted", got.Providers[1].Headers["Authorization"], Redacted},
		{"api-key header redacted", got.Providers[1].Headers["api-key"], Redacted},
		{"Helicone-Auth header redacted", got.Providers[1].Headers["Helicone-Auth"], Redacted},
		{"every other header value redacted", got.Providers[1].Headers["X-Team-Route"], Redacted},
		{"creds file path shown", got.NATS.CredsFile, "/etc/nats/tollgate.creds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
	t.Run("source config untouched", func(t *testing.T) {
		if c := current.Load(); c.Providers[0].APIKey != providerKey || c.Auth.Issuers[0].Keys[0].Secret != testSecret {
			t.Error("Redact modified the running config")
		}
	})
	t.Run("reload shows the new config", func(t *testing.T) {
		next := testConfig(t)
		next.Listen = "127.0.0.1:8181"
		current.Store(next)
		if r := do(t, "GET", base+"/admin/config", ""); !strings.Contains(r.body, `"listen": "127.0.0.1:8181"`) {
			t.Errorf("config after swap: %s", r.body)
		}
	})
}

func TestSecretName(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"api_key", true}, {"api_keys", true}, {"access_key_id", true}, {"secret", true}, {"webhook_secret", true}, {"password", true},
		{"basic_auth_password", true}, {"private_key", true}, {"auth_token", true},
		{"x-api-key", true}, {"Helicone-Auth", true}, {"Authorization", true}, {"cookie", true}, {"session_token", true},
		{"secret_access_key", true}, {"credentials", true},
		{"secret_file", false}, {"api_key_env", false}, {"public_key", false}, {"kid", false}, {"key_id", false},
		{"keys", false}, {"base_url", false}, {"name", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := secretName(tt.key); got != tt.want {
				t.Errorf("secretName(%q) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

func TestRedactURLs(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no userinfo", "nats://nats:4222", "nats://nats:4222"},
		{"a lone user is a NATS token", "nats://s3cr3t-token@nats:4222", "nats://[redacted]@nats:4222"},
		{"password", "https://u:p4ss@h/x", "https://u:xxxxx@h/x"},
		{"query values", "https://h/v1?key=AIza-123&api-version=2024", "https://h/v1?api-version=[redacted]&key=[redacted]"},
		{"list of token URLs", "nats://t1@a:4222,nats://t2@b:4222", "nats://[redacted]@a:4222,nats://[redacted]@b:4222"},
		{"unparseable query", "https://h:bad port/?key=AIza-123", "https://h:bad port/?[redacted]"},
		{"unparseable keeps nothing of the userinfo", "nats://u:p4ss@h:bad port", "nats://[redacted]@h:bad port"},
		{"plain text with an at sign", "ops@example.com", "ops@example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redactURLs(tt.in); got != tt.want {
				t.Errorf("redactURLs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestReload(t *testing.T) {
	tests := []struct {
		name     string
		reload   func(context.Context) (any, error)
		want     int
		wantBody string
	}{
		{
			name:     "ok",
			reload:   func(context.Context) (any, error) { return map[string]int{"models": 3, "providers": 2}, nil },
			want:     200,
			wantBody: `"models": 3`,
		},
		{
			name: "invalid config",
			reload: func(context.Context) (any, error) {
				return nil, errors.New(`models[0].targets[0].provider: unknown provider "nope"`)
			},
			want:     400,
			wantBody: `unknown provider \"nope\"`,
		},
		{name: "not configured", want: 404, wantBody: "not_configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := fullOptions(t)
			o.Reload = tt.reload
			r := do(t, "POST", start(t, o)+"/admin/reload", "")
			if r.status != tt.want || !strings.Contains(r.body, tt.wantBody) {
				t.Errorf("status %d body %s, want %d containing %s", r.status, r.body, tt.want, tt.wantBody)
			}
			if tt.want == 400 && errorType(t, r) != "invalid_config" {
				t.Errorf("error type %q, want invalid_config", errorType(t, r))
			}
		})
	}
}

func TestReloadSerialized(t *testing.T) {
	var running, overlap atomic.Int32
	o := fullOptions(t)
	o.Reload = func(context.Context) (any, error) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		time.Sleep(5 * time.Millisecond)
		running.Add(-1)
		return "ok", nil
	}
	base := start(t, o)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := do(t, "POST", base+"/admin/reload", ""); r.status != 200 {
				t.Errorf("status %d", r.status)
			}
		}()
	}
	wg.Wait()
	if overlap.Load() != 0 {
		t.Errorf("%d reloads ran concurrently", overlap.Load())
	}
}

func TestProbesAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_test_total", Help: "Test counter."})
	reg.MustRegister(c)
	c.Add(7)
	var notReady atomic.Bool
	o := Options{Gatherer: reg, Ready: func() error {
		if notReady.Load() {
			return errors.New("usage stream not reachable")
		}
		return nil
	}}
	base := start(t, o)
	tests := []struct {
		name     string
		setup    func()
		path     string
		want     int
		wantBody string
	}{
		{name: "healthz", path: "/healthz", want: 200, wantBody: `"status": "ok"`},
		{name: "ready", path: "/readyz", want: 200, wantBody: `"status": "ready"`},
		{name: "not ready", setup: func() { notReady.Store(true) }, path: "/readyz", want: 503, wantBody: "usage stream not reachable"},
		{name: "metrics", path: "/metrics", want: 200, wantBody: "tollgate_test_total 7"},
		{name: "routes not configured", path: "/admin/routes", want: 404, wantBody: "not_configured"},
		{name: "config not configured", path: "/admin/config", want: 404, wantBody: "not_configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup()
			}
			r := do(t, "GET", base+tt.path, "")
			if r.status != tt.want || !strings.Contains(r.body, tt.wantBody) {
				t.Errorf("status %d body %s, want %d containing %q", r.status, r.body, tt.want, tt.wantBody)
			}
		})
	}
}

func TestPprof(t *testing.T) {
	base := start(t, Options{})
	tests := []struct{ path, wantBody string }{
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/heap?debug=1", "heap profile"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
		{"/debug/pprof/symbol", "num_symbols"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := do(t, "GET", base+tt.path, "")
			if r.status != 200 || !strings.Contains(r.body, tt.wantBody) {
				t.Errorf("status %d, body without %q: %.200s", r.status, tt.wantBody, r.body)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		name string
		addr net.Addr
		want bool
	}{
		{"ipv4 loopback", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9090}, true},
		{"other 127/8", &net.TCPAddr{IP: net.IPv4(127, 1, 2, 3), Port: 9090}, true},
		{"ipv6 loopback", &net.TCPAddr{IP: net.IPv6loopback, Port: 9090}, true},
		{"ipv4 wildcard", &net.TCPAddr{IP: net.IPv4zero, Port: 9090}, false},
		{"ipv6 wildcard", &net.TCPAddr{IP: net.IPv6unspecified, Port: 9090}, false},
		{"pod address", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 9090}, false},
		{"unix socket", &net.UnixAddr{Name: "/run/tollgate/admin.sock", Net: "unix"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isLoopback(tt.addr); got != tt.want {
				t.Errorf("isLoopback(%v) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}
