package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/natstest"
)

// serveAdmin serves an admin listener for o on a loopback port until the
// test ends and returns its base URL.
func serveAdmin(t *testing.T, o admin.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := admin.New(o)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("serve admin: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// adminCall makes one request to the admin listener and returns its status
// and body.
func adminCall(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestReloadRedactsSecrets reloads, over the admin listener, a config whose
// credentials sit where the name of the field does not say so (issue 41,
// finding 5): upstream header values, a base_url query string, a NATS
// token as the URL's user. Neither the old nor the new values appear in the
// reload answer, in the config.reloaded audit event or in /admin/config;
// nor does a new NATS token in the answer and audit event of the reload
// refused for it (nats.url needs a restart).
func TestReloadRedactsSecrets(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	rec := audit.NewRecorder(js, audit.Options{})
	natsFile := func(n string) string {
		return settingsYAML(`nats:
  url: nats://nats-token-` + n + `@nats-0:4222,nats://tollgate:nats-pass-` + n + `@nats-1:4222
`)
	}
	file := func(string) string { return natsFile("old") }
	withProxy := func(n string) string {
		return strings.Replace(file(n), "  - {name: mock, kind: mock}\n", `  - {name: mock, kind: mock}
  - name: proxy
    kind: openai
    base_url: "https://proxy.example/v1?api-key=query-key-`+n+`"
    headers:
      Authorization: "Bearer hdr-bearer-`+n+`"
      api-key: hdr-azure-`+n+`
      Helicone-Auth: "Bearer sk-helicone-`+n+`"
      X-Route: hdr-custom-`+n+`
`, 1)
	}
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	writeConfig(t, path, withProxy("old"))
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
	base := serveAdmin(t, admin.Options{Config: r.Config,
		Reload: func(ctx context.Context) (any, error) { return r.Reload(ctx) }})

	secrets := []string{"nats-token-", "nats-pass-", "query-key-", "hdr-bearer-", "hdr-azure-", "sk-helicone-", "hdr-custom-"}
	shows := func(where, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows a %s... secret: %s", where, s, text)
			}
		}
	}
	writeConfig(t, path, withProxy("new"))
	status, body := adminCall(t, "POST", base+"/admin/reload")
	if status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	shows("the reload answer", body)
	for _, want := range []string{"providers[1].headers.Authorization: changed", "providers[1].headers.X-Route: changed",
		"providers[1].base_url: changed"} {
		if !strings.Contains(body, want) {
			t.Errorf("reload answer lacks %q: %s", want, body)
		}
	}
	events, err := audit.List(context.Background(), js, time.Time{})
	if err != nil || len(events) != 1 || events[0].Action != audit.ActionConfigReloaded {
		t.Fatalf("audit events %+v, %v", events, err)
	}
	ev, _ := json.Marshal(events[0])
	shows("the config.reloaded event", string(ev))

	// A reload that adds the provider shows its headers only redacted.
	writeConfig(t, path, file("new"))
	if status, body = adminCall(t, "POST", base+"/admin/reload"); status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	writeConfig(t, path, withProxy("added"))
	status, body = adminCall(t, "POST", base+"/admin/reload")
	if status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	shows("the answer to a reload adding a provider", body)
	if events, err = audit.List(context.Background(), js, time.Time{}); err != nil || len(events) != 3 {
		t.Fatalf("audit events %+v, %v", events, err)
	}
	ev, _ = json.Marshal(events[2])
	shows("the event of a reload adding a provider", string(ev))
	if !strings.Contains(string(ev), "[redacted]") {
		t.Errorf("the added provider is not in the event: %s", ev)
	}

	status, body = adminCall(t, "GET", base+"/admin/config")
	if status != 200 || !strings.Contains(body, "proxy.example") {
		t.Fatalf("config: %d %s", status, body)
	}
	shows("/admin/config", body)

	// A reload refused for a new NATS token names the key, not the token.
	writeConfig(t, path, strings.Replace(withProxy("added"), "nats-token-old", "nats-token-new", 1))
	status, body = adminCall(t, "POST", base+"/admin/reload")
	if status != 400 || !strings.Contains(body, "nats.url") {
		t.Fatalf("reload of a new NATS token: %d %s", status, body)
	}
	shows("the answer to a refused reload", body)
	if events, err = audit.List(context.Background(), js, time.Time{}); err != nil || len(events) != 4 ||
		events[3].Action != audit.ActionConfigRefused {
		t.Fatalf("audit events %+v, %v", events, err)
	}
	ev, _ = json.Marshal(events[3])
	shows("the config.reload_refused event", string(ev))
}

// TestAdminReadyz probes /readyz on the admin port and on the public one
// (issue 49, item 2): both answer 503 when an issuer has no keys and while
// the gateway drains for shutdown, 200 otherwise.
func TestAdminReadyz(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(idp.Close)
	withIdP := func(s string) string {
		return strings.Replace(s, "    - name: dev\n", `    - name: idp
      issuer: https://idp.example
      algorithms: [EdDSA]
      jwks_url: `+idp.URL+`
    - name: dev
`, 1)
	}
	tests := []struct {
		name     string
		yaml     string
		drain    bool
		want     int
		wantBody string
	}{
		{name: "ready", yaml: settingsYAML(""), want: 200, wantBody: "ready"},
		{name: "an issuer without keys", yaml: withIdP(settingsYAML("")), want: 503, wantBody: `auth issuer \"idp\" has no keys`},
		{name: "draining", yaml: settingsYAML(""), drain: true, want: 503, wantBody: "draining"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tollgate.yaml")
			writeConfig(t, path, tt.yaml)
			s, err := LoadSettings(path, staticURL("http://127.0.0.1:1/v1"))
			if err != nil {
				t.Fatal(err)
			}
			gw, err := New(Options{Config: s.Config, Verifier: s.Verifier})
			if err != nil {
				t.Fatal(err)
			}
			ln := listen(t)
			served := make(chan error, 1)
			go func() { served <- gw.Serve(ln) }()
			public := "http://" + ln.Addr().String()
			base := serveAdmin(t, admin.Options{Ready: gw.Ready})
			if status, body := adminCall(t, "GET", public+"/readyz"); !tt.drain && status != tt.want {
				t.Errorf("public /readyz: %d %s, want %d", status, body, tt.want)
			}
			if tt.drain {
				// A real shutdown: the public listener closes, the admin
				// one goes on answering.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := gw.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
			}
			status, body := adminCall(t, "GET", base+"/readyz")
			if status != tt.want || !strings.Contains(body, tt.wantBody) {
				t.Errorf("admin /readyz: %d %s, want %d with %q", status, body, tt.want, tt.wantBody)
			}
			if !tt.drain {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = gw.Shutdown(ctx)
			}
			<-served
		})
	}
}
