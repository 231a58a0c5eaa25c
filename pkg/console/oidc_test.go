package console_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/console"
)

// provider is zitadel's example OpenID Provider, served on a loopback
// port for the test, with users whose ID tokens carry a department and
// groups.
type provider struct {
	issuer string
}

// claimedStorage is the example storage; its ID tokens also carry the
// dept and groups claims of the user.
type claimedStorage struct {
	*storage.Storage
	claims map[string]map[string]any // by user id
}

// SetUserinfoFromRequest adds the user's claims to its ID token.
func (s claimedStorage) SetUserinfoFromRequest(ctx context.Context, ui *zoidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, ui, req, scopes); err != nil {
		return err
	}
	for k, v := range s.claims[req.GetSubject()] {
		ui.AppendClaims(k, v)
	}
	return nil
}

// testUser is a user of the provider.
type testUser struct {
	id, username string
	claims       map[string]any
}

const userPassword = "correct horse"

func startProvider(t *testing.T, redirectURL string, users []testUser) *provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	file := map[string]any{}
	claims := map[string]map[string]any{}
	for _, u := range users {
		file[u.id] = map[string]any{"ID": u.id, "Username": u.username, "Password": userPassword,
			"FirstName": u.username, "LastName": "Test", "Email": u.username + "@example.com", "EmailVerified": true, "PreferredLanguage": "en"}
		claims[u.id] = u.claims
	}
	b, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	us, err := storage.StoreFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st := claimedStorage{Storage: storage.NewStorageWithClients(us, map[string]*storage.Client{
		"tollgate-console": storage.WebClient("tollgate-console", "console-secret", redirectURL),
	}), claims: claims}
	srv := &http.Server{Handler: exampleop.SetupServer(issuer, st, nil, false)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &provider{issuer: issuer}
}

// oidcEnv is a console whose config trusts the provider p.
func oidcEnv(t *testing.T, users []testUser) (*env, *provider) {
	t.Helper()
	// The console's port must be known before the provider registers
	// its redirect URL: listen first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	redirect := "http://" + ln.Addr().String() + "/ui/callback"
	p := startProvider(t, redirect, users)
	secret := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(secret, []byte("console-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{
		Auth: config.Auth{Issuers: []config.Issuer{{Name: "corp", DiscoveryURL: p.issuer + config.WellKnownOpenIDConfiguration,
			Algorithms:    []string{"RS256"},
			ClaimMappings: []config.ClaimMapping{{Claim: "groups", Value: "research-staff", Dept: "research"}}}}},
		Console: config.Console{
			OIDC: config.ConsoleOIDC{Issuer: "corp", ClientID: "tollgate-console", ClientSecretFile: secret, RedirectURL: redirect},
			Roles: []config.ConsoleRole{
				{Claim: "groups", Value: "tollgate-finance", Role: access.Finance},
				{Claim: "/org/roles", Value: "key-admin", Role: access.DeptAdmin},
				{Claim: "groups", Value: "staff", Role: access.Viewer},
			},
		},
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{cfg: cfg, listen: func(testing.TB) net.Listener { return ln }})
	return e, p
}

// signInOIDC drives the authorization-code flow as a browser: the
// console sends it to the provider, the provider's login form takes the
// user name and password, the provider sends it back to the callback.
// It returns the console's last answer.
func (b *browser) signInOIDC(t *testing.T, username string) (int, http.Header, string) {
	t.Helper()
	st, h, body := b.get("/ui/login/oidc")
	if st != http.StatusFound {
		t.Fatalf("start: %d\n%s", st, body)
	}
	auth, err := url.Parse(h.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	q := auth.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" || q.Get("nonce") == "" {
		t.Fatalf("the authorization request lacks PKCE, state or nonce: %s", auth)
	}
	// Follow the provider's redirects to its login form.
	next := auth.String()
	for range 10 {
		st, h, body = b.abs(http.MethodGet, next, nil)
		if st != http.StatusFound && st != http.StatusSeeOther {
			break
		}
		next = resolve(t, next, h.Get("Location"))
	}
	m := regexp.MustCompile(`name="id" value="([^"]+)"`).FindStringSubmatch(body)
	if st != http.StatusOK || m == nil {
		t.Fatalf("no login form at the provider: %d\n%s", st, body)
	}
	login := resolve(t, next, "/login/username")
	st, h, body = b.abs(http.MethodPost, login, url.Values{"id": {m[1]}, "username": {username}, "password": {userPassword}})
	// Follow the redirects back to the console's callback.
	for range 10 {
		if st != http.StatusFound && st != http.StatusSeeOther {
			t.Fatalf("the provider did not send the browser back: %d\n%s", st, body)
		}
		next = resolve(t, login, h.Get("Location"))
		if strings.HasPrefix(next, b.base+"/ui/callback") {
			b.callback = strings.TrimPrefix(next, b.base)
			return b.abs(http.MethodGet, next, nil)
		}
		st, h, body = b.abs(http.MethodGet, next, nil)
	}
	t.Fatal("too many redirects")
	return 0, nil, ""
}

func resolve(t *testing.T, base, ref string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	r, err := u.Parse(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r.String()
}

// abs sends a request to an absolute URL (the provider's).
func (b *browser) abs(method, rawURL string, form url.Values) (int, http.Header, string) {
	b.t.Helper()
	saved := b.base
	b.base = ""
	defer func() { b.base = saved }()
	return b.do(method, rawURL, form, nil)
}

var oidcUsers = []testUser{
	{"u-fin", "fiona", map[string]any{"groups": []string{"tollgate-finance", "staff"}, "dept": "finance"}},
	{"u-eng", "erik", map[string]any{"org": map[string]any{"roles": []string{"key-admin"}}, "dept": "eng"}},
	{"u-res", "rita", map[string]any{"groups": []string{"staff", "research-staff"}}},
	{"u-none", "nora", map[string]any{"groups": []string{"contractors"}, "dept": "eng"}},
}

// TestOIDCSignIn signs users in through a real OpenID Provider: each
// gets the role of the first console.roles rule their ID token matches
// and the department of its dept claim or the issuer's claim mapping; a
// user no rule matches is refused.
func TestOIDCSignIn(t *testing.T) {
	e, _ := oidcEnv(t, oidcUsers)
	tests := []struct {
		username, sub, role, dept string
	}{
		{"fiona", "u-fin", access.Finance, "finance"},
		{"erik", "u-eng", access.DeptAdmin, "eng"},
		{"rita", "u-res", access.Viewer, "research"},
	}
	for _, tt := range tests {
		t.Run(tt.username, func(t *testing.T) {
			b := e.browser()
			st, h, body := b.signInOIDC(t, tt.username)
			if st != http.StatusSeeOther || h.Get("Location") != "/ui/" {
				t.Fatalf("callback: %d %q\n%s", st, h.Get("Location"), body)
			}
			// Any page shows who is signed in, the error pages too.
			st, _, body = b.get("/ui/")
			want := `data-sub="` + tt.sub + `" data-role="` + tt.role + `"`
			if st/100 == 3 || !strings.Contains(body, want) || !strings.Contains(body, " · "+tt.dept+"</span>") {
				t.Fatalf("overview: %d, want %s in %s\n%s", st, want, tt.dept, body)
			}
		})
	}
	t.Run("no role", func(t *testing.T) {
		b := e.browser()
		st, _, body := b.signInOIDC(t, "nora")
		if st != http.StatusForbidden || !strings.Contains(body, "no console role") || !strings.Contains(body, "error-state") {
			t.Fatalf("a user without a role: %d\n%s", st, body)
		}
		if st, _, _ := b.get("/ui/"); st != http.StatusSeeOther {
			t.Errorf("a refused user has a session: %d", st)
		}
	})
	t.Run("audited", func(t *testing.T) {
		events, err := audit.List(context.Background(), e.js, e.now().Add(-10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, ev := range events {
			if ev.Action == audit.ActionConsoleSignedIn {
				seen[ev.Actor] = true
			}
		}
		if !seen["u-fin"] || !seen["u-eng"] || seen["u-none"] {
			t.Errorf("sign-ins recorded for %v", seen)
		}
	})
}

// TestOIDCCallbackRefusesForgery replays and forges callbacks: a
// callback without the browser's login cookie (login CSRF), a state
// used once already, and a provider error each get an error page and no
// session.
func TestOIDCCallbackRefusesForgery(t *testing.T) {
	e, _ := oidcEnv(t, oidcUsers)
	b := e.browser()
	st, h, body := b.get("/ui/login/oidc")
	if st != http.StatusFound {
		t.Fatalf("start: %d\n%s", st, body)
	}
	auth, _ := url.Parse(h.Get("Location"))
	state := auth.Query().Get("state")
	tests := []struct {
		name string
		b    *browser
		path string
		want int
	}{
		{"another browser", e.browser(), "/ui/callback?code=x&state=" + url.QueryEscape(state), http.StatusBadRequest},
		{"wrong state", b, "/ui/callback?code=x&state=forged", http.StatusBadRequest},
		{"provider error", e.browser(), "/ui/callback?error=access_denied&error_description=nope", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, body := tt.b.get(tt.path)
			if st != tt.want || !strings.Contains(body, "error-state") {
				t.Fatalf("status %d, want %d\n%s", st, tt.want, body)
			}
			if st, _, _ := tt.b.get("/ui/"); st != http.StatusSeeOther {
				t.Errorf("signed in after a forged callback: %d", st)
			}
		})
	}
	// A completed sign-in's callback, replayed, is refused.
	b2 := e.browser()
	if st, _, body := b2.signInOIDC(t, "fiona"); st != http.StatusSeeOther {
		t.Fatalf("sign-in: %d\n%s", st, body)
	}
	replay := e.browser()
	replay.setCookie(console.LoginCookie, stateOf(t, b2.callback))
	if st, _, body := replay.get(b2.callback); st != http.StatusBadRequest || !strings.Contains(body, "used already") {
		t.Fatalf("replayed callback with its state cookie: %d\n%s", st, body)
	}
	if st, _, _ := replay.get("/ui/"); st != http.StatusSeeOther {
		t.Errorf("signed in by a replayed callback: %d", st)
	}
}

func stateOf(t *testing.T, callback string) string {
	t.Helper()
	u, err := url.Parse(callback)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("state")
}
