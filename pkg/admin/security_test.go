package admin

import (
	"context"
	"io"
	"net"
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

// TestAdminRefusesWebPages sends what a web page can make a browser send
// to the open loopback listener (issue 41, finding 4): cross-site form
// posts and a DNS rebinding page's requests. Each is refused with a JSON
// error and changes nothing; the same requests from a same-origin or
// non-browser client pass.
func TestAdminRefusesWebPages(t *testing.T) {
	o := fullOptions(t)
	var unrevokes atomic.Int32
	o.Unrevoke = func(context.Context, string, string) error { unrevokes.Add(1); return nil }
	o.AllowedHosts = []string{"Admin.Internal"}
	base := start(t, o)
	port := strings.TrimPrefix(base, "http://127.0.0.1:")
	const crossSite = "cross-site"
	tests := []struct {
		name, method, path, host, ctype, origin, fetchSite, body string
		want                                                     int
		wantType                                                 string
	}{
		{name: "text/plain form creates a key", method: "POST", path: "/admin/keys", ctype: "text/plain",
			origin: "http://evil.example", fetchSite: crossSite, body: `{"sub":"mallory","dept":"eng"}`, want: 403, wantType: "cross_site_request"},
		{name: "text/plain body without browser headers", method: "POST", path: "/admin/keys", ctype: "text/plain",
			body: `{"sub":"mallory","dept":"eng"}`, want: 415, wantType: "unsupported_media_type"},
		{name: "urlencoded form un-revokes a subject", method: "POST", path: "/admin/unrevoke", ctype: "application/x-www-form-urlencoded",
			origin: "http://evil.example", fetchSite: crossSite, body: `{"sub":"mallory"}`, want: 403, wantType: "cross_site_request"},
		{name: "text/plain un-revoke, Origin only", method: "POST", path: "/admin/unrevoke", ctype: "text/plain",
			origin: "http://evil.example", body: `{"sub":"mallory"}`, want: 403, wantType: "cross_site_request"},
		{name: "text/plain un-revoke without browser headers", method: "POST", path: "/admin/unrevoke", ctype: "text/plain",
			body: `{"sub":"mallory"}`, want: 415, wantType: "unsupported_media_type"},
		{name: "multipart form un-revokes", method: "POST", path: "/admin/unrevoke", ctype: "multipart/form-data; boundary=x",
			body: "--x--", want: 415, wantType: "unsupported_media_type"},
		{name: "JSON from a cross-site fetch", method: "POST", path: "/admin/keys", ctype: "application/json",
			fetchSite: crossSite, body: `{"sub":"mallory","dept":"eng"}`, want: 403, wantType: "cross_site_request"},
		{name: "a same-site page on another port", method: "POST", path: "/admin/unrevoke", ctype: "application/json",
			origin: "http://localhost:3000", fetchSite: "same-site", body: `{"sub":"mallory"}`, want: 403, wantType: "cross_site_request"},
		{name: "a sandboxed page (Origin null)", method: "POST", path: "/admin/reload", ctype: "application/json",
			origin: "null", body: `{}`, want: 403, wantType: "cross_site_request"},
		{name: "empty form posts a reload", method: "POST", path: "/admin/reload", ctype: "application/x-www-form-urlencoded",
			want: 415, wantType: "unsupported_media_type"},
		{name: "cross-site key rotation", method: "POST", path: "/admin/keys/0123456789abcdef/rotate",
			fetchSite: crossSite, want: 403, wantType: "cross_site_request"},
		{name: "DNS rebinding reads the keys", method: "GET", path: "/admin/keys", host: "evil.example:" + port, want: 403, wantType: "host_not_allowed"},
		{name: "DNS rebinding reads the config", method: "GET", path: "/admin/config", host: "evil.example:" + port, want: 403, wantType: "host_not_allowed"},
		{name: "DNS rebinding reads a profile", method: "GET", path: "/debug/pprof/cmdline", host: "evil.example", want: 403, wantType: "host_not_allowed"},
		{name: "DNS rebinding posts a reload", method: "POST", path: "/admin/reload", host: "evil.example", want: 403, wantType: "host_not_allowed"},
		{name: "a name that ends like localhost", method: "GET", path: "/admin/config", host: "localhost.evil.example", want: 403, wantType: "host_not_allowed"},
		// What passes: the matrix above can fail.
		{name: "localhost reads the config", method: "GET", path: "/admin/config", host: "localhost:" + port, want: 200},
		{name: "[::1] reads the keys", method: "GET", path: "/admin/keys", host: "[::1]:" + port, want: 200},
		{name: "a configured name, any case", method: "GET", path: "/admin/config", host: "admin.internal:" + port, want: 200},
		{name: "probes answer any Host", method: "GET", path: "/readyz", host: "evil.example", want: 200},
		{name: "same-origin JSON creates a key", method: "POST", path: "/admin/keys", ctype: "application/json; charset=utf-8",
			origin: base, fetchSite: "same-origin", body: `{"sub":"alice","dept":"eng"}`, want: 201},
		{name: "curl -X POST reload", method: "POST", path: "/admin/reload", want: 200},
		{name: "a script's JSON un-revoke", method: "POST", path: "/admin/unrevoke", ctype: "application/json", body: `{"sub":"alice"}`, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			for k, v := range map[string]string{"Content-Type": tt.ctype, "Origin": tt.origin, "Sec-Fetch-Site": tt.fetchSite} {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			r := response{resp.StatusCode, resp.Header, readAll(t, resp)}
			if r.status != tt.want {
				t.Fatalf("status %d, want %d: %s", r.status, tt.want, r.body)
			}
			if tt.wantType != "" {
				if typ := errorType(t, r); typ != tt.wantType {
					t.Errorf("error type %q, want %q", typ, tt.wantType)
				}
				if strings.Contains(r.body, "corp.test") || strings.Contains(r.body, `"id"`) {
					t.Errorf("refusal shows admin data: %s", r.body)
				}
			}
		})
	}
	// What the attacker changed: nothing.
	keys, err := o.Keys.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].Subject != "alice" {
		t.Errorf("keys after the attacks: %+v, want only alice's", keys)
	}
	if n := unrevokes.Load(); n != 1 {
		t.Errorf("%d un-revocations, want 1 (the script's)", n)
	}
}

func TestHostSet(t *testing.T) {
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9090}
	pod := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 9090}
	wild := &net.TCPAddr{IP: net.IPv4zero, Port: 9090}
	tests := []struct {
		name       string
		addr       net.Addr
		listenHost string
		extra      []string
		host       string
		want       bool
	}{
		{"loopback IP", loop, "", nil, "127.0.0.1:9090", true},
		{"other loopback IP", loop, "", nil, "127.9.9.9", true},
		{"ipv6 loopback", loop, "", nil, "[::1]:9090", true},
		{"localhost, trailing dot, upper case", loop, "", nil, "LOCALHOST.:9090", true},
		{"foreign name", loop, "", nil, "evil.example:9090", false},
		{"foreign IP on a loopback listener", loop, "", nil, "10.1.2.3:9090", false},
		{"listen address name", loop, "admin.local", nil, "admin.local:9090", true},
		{"configured name", loop, "", []string{"tollgate-admin.ops.svc"}, "tollgate-admin.ops.svc:9090", true},
		{"listener's own IP", pod, "", nil, "10.1.2.3:9090", true},
		{"another IP of a pod listener", pod, "", nil, "10.9.9.9:9090", false},
		{"any IP on a wildcard listener", wild, "0.0.0.0", nil, "10.9.9.9:9090", true},
		{"a name on a wildcard listener", wild, "0.0.0.0", nil, "evil.example", false},
		{"no Host (HTTP/1.0)", loop, "", nil, "", true},
		{"only a port", loop, "", nil, ":9090", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHostSet(tt.addr, tt.listenHost, tt.extra)
			if got := hs.allows(tt.host); got != tt.want {
				t.Errorf("allows(%q) = %v, want %v", tt.host, got, tt.want)
			}
		})
	}
}
