package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natstest"
)

// reloadRig is a gateway and its admin listener on loopback sockets, run
// by a Reloader of a config file, with audit events on a real NATS.
type reloadRig struct {
	t         *testing.T
	path      string
	mockURL   string
	publicURL string
	adminURL  string
	js        jetstream.JetStream
}

// reloadYAML is the rig's config: nats.url and admin.require_token as
// given, and extra appended to the models list.
func reloadYAML(mockURL, natsURL string, requireToken bool, extraModels string) string {
	rt := "false"
	if requireToken {
		rt = "true"
	}
	return `listen: 127.0.0.1:0
admin: {require_token: ` + rt + `}
nats: {url: "` + natsURL + `"}
` + testAuthYAML + `providers:
  - {name: mock, kind: openai, base_url: "` + mockURL + `", api_key: ` + testProvKey + `}
models:
  - name: mock-gpt
    targets: [{provider: mock}]
` + extraModels
}

func newReloadRig(t *testing.T) *reloadRig {
	t.Helper()
	mock := mockllm.New(mockllm.Config{})
	mln := listen(t)
	go func() { _ = mock.Serve(mln) }()
	t.Cleanup(func() { _ = mock.Shutdown() })
	r := &reloadRig{t: t, path: filepath.Join(t.TempDir(), "tollgate.yaml"), mockURL: "http://" + mln.Addr().String() + "/v1"}
	writeConfig(t, r.path, reloadYAML(r.mockURL, "nats://10.0.0.1:4222", false, ""))

	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r.js = js
	s, err := LoadSettings(r.path, staticURL(""))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Options{Config: s.Config, Verifier: s.Verifier})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	r.publicURL = "http://" + ln.Addr().String()

	rl := NewReloader(r.path, s, gw, &fakeLimits{}, staticURL(""), audit.NewRecorder(js, audit.Options{}), slog.New(slog.DiscardHandler))
	srv := admin.New(admin.Options{Verify: rl.Verify, RequireToken: s.Config.Admin.RequireToken, Config: rl.Config,
		Reload: func(ctx context.Context) (any, error) { return rl.Reload(ctx) }})
	rl.OnApply(func(c *config.Config) { srv.SetRequireToken(c.Admin.RequireToken) })
	aln := listen(t)
	go func() { _ = srv.Serve(aln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	r.adminURL = "http://" + aln.Addr().String()
	return r
}

// adminToken is a token whose principal has the admin claim.
func (r *reloadRig) adminToken() string {
	tok, err := auth.Mint(auth.MintOptions{Issuer: testIssuer, Audience: testAudience, Subject: "ops", TTL: time.Hour,
		KID: "k1", Key: []byte(testSecret), Admin: true}, time.Now())
	if err != nil {
		r.t.Fatal(err)
	}
	return tok
}

// do sends a request with an optional bearer token and returns the status
// and body.
func (r *reloadRig) do(method, url, token, body string) (int, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// chat asks the public listener for model and returns the status.
func (r *reloadRig) chat(model string) int {
	r.t.Helper()
	tok, err := auth.Mint(auth.MintOptions{Issuer: testIssuer, Audience: testAudience, Subject: "alice", TTL: time.Hour,
		KID: "k1", Key: []byte(testSecret)}, time.Now())
	if err != nil {
		r.t.Fatal(err)
	}
	code, _ := r.do(http.MethodPost, r.publicURL+"/v1/chat/completions", tok, `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
	return code
}

// runningConfig is GET /admin/config with the admin token.
func (r *reloadRig) runningConfig() map[string]any {
	r.t.Helper()
	code, body := r.do(http.MethodGet, r.adminURL+"/admin/config", r.adminToken(), "")
	if code != http.StatusOK {
		r.t.Fatalf("GET /admin/config: %d %s", code, body)
	}
	var c map[string]any
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		r.t.Fatal(err)
	}
	return c
}

// lastEvent is the newest audit event.
func (r *reloadRig) lastEvent() audit.Event {
	r.t.Helper()
	events, err := audit.List(context.Background(), r.js, time.Time{})
	if err != nil || len(events) == 0 {
		r.t.Fatalf("audit events: %v, %v", events, err)
	}
	return events[len(events)-1]
}

// TestReloadClasses: over real sockets, a reload that changes keys it can
// apply takes effect (admin.require_token closes the admin API at once, a
// new model is served), and one that changes a restart-only key is refused
// naming it, audited, and leaves the running config and routes as they
// were, in /admin/config too.
func TestReloadClasses(t *testing.T) {
	r := newReloadRig(t)
	const model2 = "  - name: mock-2\n    targets: [{provider: mock}]\n"

	t.Run("applied", func(t *testing.T) {
		if code, body := r.do(http.MethodGet, r.adminURL+"/admin/config", "", ""); code != http.StatusOK {
			t.Fatalf("open admin API before the reload: %d %s", code, body)
		}
		if code := r.chat("mock-2"); code != http.StatusNotFound {
			t.Fatalf("mock-2 before the reload: %d, want 404", code)
		}
		writeConfig(t, r.path, reloadYAML(r.mockURL, "nats://10.0.0.1:4222", true, model2))
		if code, body := r.do(http.MethodPost, r.adminURL+"/admin/reload", "", ""); code != http.StatusOK {
			t.Fatalf("reload: %d %s", code, body)
		}
		if code, body := r.do(http.MethodGet, r.adminURL+"/admin/config", "", ""); code != http.StatusUnauthorized {
			t.Errorf("admin API without a token after require_token was reloaded on: %d %s, want 401", code, body)
		}
		if code := r.chat("mock-2"); code != http.StatusOK {
			t.Errorf("mock-2 after the reload: %d, want 200", code)
		}
		if models, _ := r.runningConfig()["models"].([]any); len(models) != 2 {
			t.Errorf("/admin/config models %v, want the 2 reloaded", models)
		}
		e := r.lastEvent()
		if e.Action != audit.ActionConfigReloaded || !strings.HasPrefix(e.Summary, "applied: ") ||
			!strings.Contains(e.Summary, "admin.require_token") || !strings.Contains(e.Summary, "models") {
			t.Errorf("audit event %s %q, want config.reloaded applying admin.require_token and models", e.Action, e.Summary)
		}
	})

	t.Run("refused", func(t *testing.T) {
		// nats.url needs a restart; the model removed with it must not be
		// removed either.
		writeConfig(t, r.path, reloadYAML(r.mockURL, "nats://10.0.0.2:4222", true, ""))
		code, body := r.do(http.MethodPost, r.adminURL+"/admin/reload", r.adminToken(), "")
		if code != http.StatusBadRequest || !strings.Contains(body, "nats.url") || !strings.Contains(body, "restart") {
			t.Fatalf("reload changing nats.url: %d %s, want 400 naming nats.url and a restart", code, body)
		}
		c := r.runningConfig()
		if nats, _ := c["nats"].(map[string]any); nats["url"] != "nats://10.0.0.1:4222" {
			t.Errorf("/admin/config nats %v, want the running url nats://10.0.0.1:4222", nats)
		}
		if models, _ := c["models"].([]any); len(models) != 2 {
			t.Errorf("/admin/config models %v, want the 2 running", models)
		}
		if code := r.chat("mock-2"); code != http.StatusOK {
			t.Errorf("mock-2 after the refused reload: %d, want 200", code)
		}
		e := r.lastEvent()
		if e.Action != audit.ActionConfigRefused || e.Actor != "ops" || !strings.Contains(e.Summary, "needs a restart: nats.url") {
			t.Errorf("audit event %s by %s %q, want config.reload_refused by ops naming nats.url", e.Action, e.Actor, e.Summary)
		}
	})

	t.Run("cache ttl without the cache", func(t *testing.T) {
		writeConfig(t, r.path, reloadYAML(r.mockURL, "nats://10.0.0.1:4222", true, model2+"    cache: {ttl: 1m}\n"))
		code, body := r.do(http.MethodPost, r.adminURL+"/admin/reload", r.adminToken(), "")
		if code != http.StatusBadRequest || !strings.Contains(body, "models[1].cache.ttl") {
			t.Fatalf("reload adding a cache.ttl: %d %s, want 400 naming models[1].cache.ttl", code, body)
		}
		models, _ := r.runningConfig()["models"].([]any)
		if len(models) != 2 || strings.Contains(fmt.Sprint(models[1]), "1m0s") {
			t.Errorf("/admin/config models %v, want the running ones, without the refused cache.ttl", models)
		}
		if e := r.lastEvent(); e.Action != audit.ActionConfigRefused || !strings.Contains(e.Summary, "models[1].cache.ttl") {
			t.Errorf("audit event %s %q, want config.reload_refused naming models[1].cache.ttl", e.Action, e.Summary)
		}
	})
}
