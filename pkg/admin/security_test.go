package admin

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/auth"
)

// adminRoutes is every guarded route of the admin listener, with the method
// that serves it.
var adminRoutes = []struct{ method, path string }{
	{"GET", "/admin/config"},
	{"GET", "/admin/routes"},
	{"GET", "/admin/budgets"},
	{"POST", "/admin/reload"},
	{"GET", "/admin/usage/req_0123456789abcdef"},
	{"GET", "/admin/usage/../config"},
	{"GET", "/admin/keys"},
	{"POST", "/admin/keys"},
	{"DELETE", "/admin/keys/0123456789abcdef"},
	{"POST", "/admin/keys/0123456789abcdef/rotate"},
	{"GET", "/admin/unknown"},
	{"GET", "/debug/pprof/"},
	{"GET", "/debug/pprof/cmdline"},
	{"GET", "/debug/pprof/profile?seconds=1"},
	{"GET", "/debug/pprof/symbol"},
	{"GET", "/debug/pprof/trace?seconds=1"},
	{"GET", "/debug/pprof/heap"},
	{"GET", "/debug/pprof/goroutine?debug=2"},
	{"GET", "/debug/pprof/allocs"},
	{"GET", "/debug/vars"},
}

// TestAdminRoutesNeedAdminClaim runs every guarded route with every kind of
// caller that is not an admin: each is refused with 401 (no valid token) or
// 403 (valid token without the admin claim), and no refusal echoes the
// token or shows a secret.
func TestAdminRoutesNeedAdminClaim(t *testing.T) {
	o := fullOptions(t)
	o.RequireToken = true
	var reloads atomic.Int32
	reload := o.Reload
	o.Reload = func(ctx context.Context) (any, error) { reloads.Add(1); return reload(ctx) }
	base := start(t, o)
	user := token(t, false)
	expiredAdmin, err := auth.Mint(auth.MintOptions{Issuer: "https://corp.test", Subject: "ops", Admin: true,
		KID: "k1", Key: []byte(testSecret), TTL: time.Minute}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := auth.Mint(auth.MintOptions{Issuer: "https://corp.test", Subject: "ops", Admin: true,
		KID: "k1", Key: []byte("some-other-secret-of-enough-length-000"), TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin := token(t, true)
	callers := []struct {
		name   string
		header string // Authorization value; "" sends none
		query  string // appended to the URL
		status int
	}{
		{name: "no token", status: 401},
		{name: "not a bearer", header: "Basic " + admin, status: 401},
		{name: "garbage token", header: "Bearer not.a.jwt", status: 401},
		{name: "expired admin token", header: "Bearer " + expiredAdmin, status: 401},
		{name: "admin claim signed with another key", header: "Bearer " + otherKey, status: 401},
		{name: "admin token in the query string", query: "access_token=" + admin, status: 401},
		{name: "valid token without admin claim", header: "Bearer " + user, status: 403},
	}
	for _, rt := range adminRoutes {
		for _, c := range callers {
			t.Run(rt.method+" "+rt.path+"/"+c.name, func(t *testing.T) {
				url := base + rt.path
				if c.query != "" {
					sep := "?"
					if strings.Contains(url, "?") {
						sep = "&"
					}
					url += sep + c.query
				}
				req, err := http.NewRequest(rt.method, url, nil)
				if err != nil {
					t.Fatal(err)
				}
				if c.header != "" {
					req.Header.Set("Authorization", c.header)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				r := response{resp.StatusCode, resp.Header, readAll(t, resp)}
				if r.status != c.status {
					t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
				}
				typ := errorType(t, r)
				if want := map[int]string{401: "unauthorized", 403: "forbidden"}[c.status]; typ != want {
					t.Errorf("error type %q, want %q", typ, want)
				}
				for _, secret := range []string{admin, user, expiredAdmin, otherKey, testSecret, providerKey} {
					if strings.Contains(r.body, secret) {
						t.Errorf("refusal echoes a token or secret: %s", r.body)
					}
				}
			})
		}
	}
	if n := reloads.Load(); n != 0 {
		t.Errorf("refused callers triggered %d reloads", n)
	}
	// The same routes open for an admin token (the matrix above can fail).
	r := do(t, "GET", base+"/admin/config", admin)
	if r.status != 200 || strings.Contains(r.body, providerKey) {
		t.Errorf("admin GET /admin/config: status %d, body %s", r.status, r.body)
	}
}

// TestAdminPathTricks sends paths that try to reach a guarded handler by
// another spelling; none may answer 2xx without a token.
func TestAdminPathTricks(t *testing.T) {
	o := fullOptions(t)
	o.RequireToken = true
	base := start(t, o)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{
		"/admin//config", "/admin/./config", "/healthz/../admin/config", "/metrics/../admin/config",
		"/ADMIN/config", "/admin/config%2f", "/%61dmin/config", "/debug/pprof/../../admin/config",
		"/admin/config?x=/healthz", "/healthz%2f..%2fadmin%2fconfig",
	} {
		t.Run(path, func(t *testing.T) {
			req, err := http.NewRequest("GET", base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.RawPath = "" // send the path as written
			req.URL.Opaque = path
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode < 300 || strings.Contains(body, "corp.test") {
				t.Errorf("status %d without a token: %s", resp.StatusCode, body)
			}
		})
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
