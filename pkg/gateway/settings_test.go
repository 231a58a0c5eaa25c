package gateway

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// settingsYAML is a small valid config with a mock provider; extra is
// appended as more top-level keys.
func settingsYAML(extra string) string {
	return `
listen: 127.0.0.1:0
auth:
  issuers:
    - name: dev
      issuer: tollgate-dev
      audience: tollgate
      algorithms: [HS256]
      keys:
        - {kid: k1, secret: test-secret-test-secret-test-secret}
providers:
  - {name: mock, kind: mock}
models:
  - name: mock-gpt
    targets: [{provider: mock}]
` + extra
}

func writeConfig(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func staticURL(u string) func() (string, error) {
	return func() (string, error) { return u, nil }
}

func TestLoadSettings(t *testing.T) {
	down := errors.New("no port")
	tests := []struct {
		name      string
		yaml      string
		mockURL   func() (string, error)
		wantErr   string // "" for a valid file
		wantErrIs error
	}{
		{name: "valid", yaml: settingsYAML(`
budgets:
  - {scope: dept, value: eng, amount_usd: "10", period: month}
prices:
  mock-gpt: {input: "1", output: "2"}
`)},
		{name: "yaml syntax", yaml: settingsYAML("garbage: [\n"), wantErr: "parse yaml"},
		{name: "unknown key", yaml: settingsYAML("colour: blue\n"), wantErr: "colour"},
		{name: "bad price", yaml: settingsYAML("prices:\n  mock-gpt: {input: lots}\n"), wantErr: `prices["mock-gpt"]`},
		{name: "limits above the global limit", yaml: settingsYAML(`
budgets:
  - {scope: global, amount_usd: "10", period: month}
  - {scope: dept, value: eng, amount_usd: "20", period: month}
`), wantErr: "global"},
		{name: "mock upstream unavailable", yaml: settingsYAML(""), mockURL: func() (string, error) { return "", down }, wantErrIs: down},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tollgate.yaml")
			writeConfig(t, path, tt.yaml)
			calls := 0
			mockURL := func() (string, error) {
				calls++
				if tt.mockURL != nil {
					return tt.mockURL()
				}
				return "http://127.0.0.1:1/v1", nil
			}
			s, err := LoadSettings(path, mockURL)
			switch {
			case tt.wantErrIs != nil:
				if !errors.Is(err, tt.wantErrIs) {
					t.Fatalf("err = %v, want %v", err, tt.wantErrIs)
				}
				return
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if calls != 1 {
				t.Errorf("mockURL called %d times, want 1", calls)
			}
			if got := s.Config.Provider("mock").BaseURL; got != "http://127.0.0.1:1/v1" {
				t.Errorf("mock provider base URL %q", got)
			}
			if s.Verifier == nil || s.Prices == nil {
				t.Fatal("no verifier or price table")
			}
			if p, ok := s.Prices.Lookup("mock-gpt"); !ok || p.InputPerM != 1e9 {
				t.Errorf("price override not applied: %+v %v", p, ok)
			}
			if len(s.Limits) != 1 {
				t.Errorf("limits %+v", s.Limits)
			}
		})
	}
}

// fakeLimits records the limits a reload sets.
type fakeLimits struct{ set [][]budget.Limit }

func (f *fakeLimits) SetLimits(l []budget.Limit) { f.set = append(f.set, l) }

func TestReloader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	writeConfig(t, path, settingsYAML(""))
	mockURL := staticURL("http://127.0.0.1:1/v1")
	s, err := LoadSettings(path, mockURL)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Options{Config: s.Config, Verifier: s.Verifier})
	if err != nil {
		t.Fatal(err)
	}
	limits := &fakeLimits{}
	notStarted := func() (string, error) { return "", errors.New("not started") }
	tests := []struct {
		name      string
		yaml      string
		mockURL   func() (string, error)
		wantErr   error // nil: the reload applies
		wantModel string
	}{
		{name: "new model and limit", yaml: settingsYAML(`  - name: mock-2
    targets: [{provider: mock}]
budgets:
  - {scope: dept, value: eng, amount_usd: "10", period: month}
`), mockURL: mockURL, wantModel: "mock-2"},
		{name: "invalid file keeps the running config", yaml: "garbage: [\n", mockURL: mockURL, wantErr: errors.New("parse yaml")},
		{name: "mock added without the mock upstream", yaml: settingsYAML(""), mockURL: notStarted, wantErr: errMockAdded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReloader(path, s, gw, limits, tt.mockURL, nil, slog.New(slog.DiscardHandler))
			before, applied := r.Config(), len(limits.set)
			writeConfig(t, path, tt.yaml)
			sum, err := r.Reload(context.Background())
			if tt.wantErr != nil {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr.Error()) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if r.Config() != before || len(limits.set) != applied {
					t.Fatal("a refused reload changed the running config or limits")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sum.Models != 2 || sum.Budgets != 1 || sum.Providers != 1 || sum.Prices == "" {
				t.Errorf("summary %+v", sum)
			}
			if r.Config() == before || r.Config().Model(tt.wantModel) == nil {
				t.Error("reloaded config not running")
			}
			found := false
			for _, m := range gw.Routes().Models {
				found = found || m.Model == tt.wantModel
			}
			if !found {
				t.Errorf("gateway routes lack %s", tt.wantModel)
			}
			if len(limits.set) != applied+1 || len(limits.set[applied]) != 1 {
				t.Errorf("limits set %+v", limits.set)
			}
		})
	}
}

func TestReloaderAudit(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rec := audit.NewRecorder(js, audit.Options{})
	yaml := func(key, amount string) string {
		return strings.Replace(settingsYAML(`budgets:
  - {scope: dept, value: eng, amount_usd: "`+amount+`", period: month}
`), "  - {name: mock, kind: mock}\n", "  - {name: mock, kind: mock}\n  - {name: openai, kind: openai, base_url: \"https://api.example.com/v1\", api_key: "+key+"}\n", 1)
	}
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	writeConfig(t, path, yaml("sk-old-secret-1111", "5"))
	mockURL := staticURL("http://127.0.0.1:1/v1")
	s, err := LoadSettings(path, mockURL)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Options{Config: s.Config, Verifier: s.Verifier})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReloader(path, s, gw, &fakeLimits{}, mockURL, rec, slog.New(slog.DiscardHandler))
	ctx := audit.WithActor(context.Background(), "ops")

	// An invalid file is refused and records nothing.
	writeConfig(t, path, "garbage: [\n")
	if _, err := r.Reload(ctx); err == nil || errors.Is(err, audit.ErrNotRecorded) {
		t.Fatalf("invalid reload: err = %v", err)
	}
	if events, _ := audit.List(ctx, js, time.Time{}); len(events) != 0 {
		t.Fatalf("a refused reload recorded %+v", events)
	}

	writeConfig(t, path, yaml("sk-new-secret-2222", "10"))
	sum, err := r.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events, err := audit.List(ctx, js, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 {
		t.Fatalf("%d events, want config.reloaded and budget.changed: %+v", len(events), events)
	}
	reload, budgets := events[0], events[1]
	if reload.Action != audit.ActionConfigReloaded || reload.Actor != "ops" || reload.Target != path {
		t.Errorf("reload event %+v", reload)
	}
	for _, want := range []string{`budgets[0].amount_usd: "5" -> "10"`, "providers[1].api_key: changed"} {
		if !strings.Contains(reload.Summary, want) || !slices.Contains(sum.Changes, want) {
			t.Errorf("summary %q / changes %q lack %q", reload.Summary, sum.Changes, want)
		}
	}
	if budgets.Action != audit.ActionBudgetChanged || budgets.Actor != "ops" || budgets.Summary != `budgets[0].amount_usd: "5" -> "10"` {
		t.Errorf("budget event %+v", budgets)
	}
	if string(budgets.Before) != `{"budgets[0].amount_usd":"5"}` || string(budgets.After) != `{"budgets[0].amount_usd":"10"}` {
		t.Errorf("budget before %s after %s", budgets.Before, budgets.After)
	}
	for _, e := range events {
		all, _ := json.Marshal(e)
		if strings.Contains(string(all), "secret-1111") || strings.Contains(string(all), "secret-2222") {
			t.Errorf("event carries a secret: %s", all)
		}
	}

	// A SIGHUP reload is recorded with the actor "signal".
	sigs := make(chan os.Signal, 1)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx, sigs) }()
	sigs <- os.Interrupt
	testkit.Wait(t, 5*time.Second, "the reload's audit event", func() bool {
		events, _ = audit.List(ctx, js, time.Time{})
		return len(events) >= 3
	})
	cancel()
	<-done
	if len(events) != 3 || events[2].Actor != audit.ActorSignal || events[2].Summary != "no changes" {
		t.Errorf("after SIGHUP: %+v", events)
	}
}

// TestReloaderKeys: an issuer configured by jwks_url has its keys at load
// (start-up and reload fetch before serving), and while the Reloader runs a
// key rotated at the identity provider is picked up without a restart, on
// the running config and on a reloaded one.
func TestReloaderKeys(t *testing.T) {
	var mu sync.Mutex
	keys := map[string]ed25519.PrivateKey{}
	addKey := func(kid string) {
		_, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		keys[kid] = priv
		mu.Unlock()
	}
	addKey("k1")
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var set []map[string]string
		for kid, k := range keys {
			set = append(set, map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": kid, "use": "sig",
				"x": base64.RawURLEncoding.EncodeToString(k.Public().(ed25519.PublicKey))})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": set})
	}))
	t.Cleanup(idp.Close)
	yaml := func(extra string) string {
		return strings.Replace(settingsYAML(extra), "    - name: dev\n", `    - name: idp
      issuer: https://idp.example
      algorithms: [EdDSA]
      jwks_url: `+idp.URL+`
      jwks_refresh_min: 10ms
    - name: dev
`, 1)
	}
	token := func(kid string) []byte {
		mu.Lock()
		k := keys[kid]
		mu.Unlock()
		tok, err := auth.Mint(auth.MintOptions{Issuer: "https://idp.example", Subject: "s", Dept: "d", Alg: "EdDSA", KID: kid, Key: k}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return []byte(tok)
	}
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	writeConfig(t, path, yaml(""))
	s, err := LoadSettings(path, staticURL("http://127.0.0.1:1/v1"))
	if err != nil || s.KeysErr != nil {
		t.Fatalf("load: %v, keys: %v", err, s.KeysErr)
	}
	gw, err := New(Options{Config: s.Config, Verifier: s.Verifier})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReloader(path, s, gw, &fakeLimits{}, staticURL("http://127.0.0.1:1/v1"), nil, slog.New(slog.DiscardHandler))
	if _, err := r.Verify(token("k1")); err != nil {
		t.Fatalf("a token of the fetched key before Run: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	accepted := func(kid string) bool { _, err := r.Verify(token(kid)); return err == nil }
	addKey("k2")
	testkit.Wait(t, 5*time.Second, "the rotated key", func() bool { return accepted("k2") })
	writeConfig(t, path, yaml(`budgets:
  - {scope: dept, value: eng, amount_usd: "10", period: month}
`))
	if _, err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	addKey("k3")
	testkit.Wait(t, 5*time.Second, "a key rotated after the reload", func() bool { return accepted("k3") && accepted("k1") })
}

// TestReloaderOverride: a key the process sets over the file at start
// (gateway -embed's spool directory) is set again on every reloaded
// config through Override, so an unchanged file reloads; without it the
// file's value reads as a change to a restart-only key and is refused.
func TestReloaderOverride(t *testing.T) {
	for _, override := range []bool{true, false} {
		t.Run(map[bool]string{true: "override", false: "none"}[override], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tollgate.yaml")
			writeConfig(t, path, settingsYAML(""))
			mockURL := staticURL("http://127.0.0.1:1/v1")
			s, err := LoadSettings(path, mockURL)
			if err != nil {
				t.Fatal(err)
			}
			s.Config.Usage.SpoolDir = "/var/lib/tollgate/spool" // what -embed -data-dir does at start
			gw, err := New(Options{Config: s.Config, Verifier: s.Verifier})
			if err != nil {
				t.Fatal(err)
			}
			r := NewReloader(path, s, gw, &fakeLimits{}, mockURL, nil, slog.New(slog.DiscardHandler))
			if override {
				r.Override(func(c *config.Config) { c.Usage.SpoolDir = "/var/lib/tollgate/spool" })
			}
			_, err = r.Reload(context.Background())
			switch {
			case override && err != nil:
				t.Fatalf("reload of the unchanged file: %v", err)
			case !override && (!errors.Is(err, ErrNeedsRestart) || !strings.Contains(err.Error(), "usage.spool_dir")):
				t.Fatalf("reload without the override: err = %v, want one naming usage.spool_dir", err)
			}
			if got := r.Config().Usage.SpoolDir; got != "/var/lib/tollgate/spool" {
				t.Errorf("running spool dir %q", got)
			}
		})
	}
}
