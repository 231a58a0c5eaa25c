package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/console"
)

// TestCSRF posts a key without the session's token, with another
// session's token and with a wrong one: each is refused with 403 and no
// key is made; the right token in the form or the header passes.
func TestCSRF(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.signedIn(console.User{Subject: "ada", Role: access.Admin})
	other := e.signedIn(console.User{Subject: "eve", Role: access.Admin})
	origin := map[string]string{"Origin": b.base}
	form := func(csrf string) url.Values {
		v := url.Values{"sub": {"svc"}, "dept": {"eng"}}
		if csrf != "" {
			v.Set("csrf", csrf)
		}
		return v
	}
	tests := []struct {
		name string
		form url.Values
		hdr  map[string]string
		want int
	}{
		{"missing", form(""), origin, http.StatusForbidden},
		{"wrong", form("x" + b.csrf[1:]), origin, http.StatusForbidden},
		{"another session's", form(other.csrf), origin, http.StatusForbidden},
		{"wrong header", form(""), map[string]string{"Origin": b.base, console.CSRFHeader: "nope"}, http.StatusForbidden},
		{"form field", form(b.csrf), origin, http.StatusOK},
		{"header", form(""), map[string]string{"Origin": b.base, console.CSRFHeader: b.csrf}, http.StatusOK},
	}
	made := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, body := b.do(http.MethodPost, "/ui/keys", tt.form, tt.hdr)
			if st != tt.want {
				t.Fatalf("status %d, want %d\n%s", st, tt.want, body)
			}
			if st == http.StatusOK {
				made++
			} else if !strings.Contains(body, "CSRF") {
				t.Errorf("the refusal does not say why:\n%s", body)
			}
			list, err := e.keys.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != made {
				t.Errorf("%d keys in the store, want %d", len(list), made)
			}
		})
	}
	// Logging out needs the token too: a cross-site page cannot end a session.
	if st, _, _ := b.do(http.MethodPost, "/ui/logout", url.Values{}, origin); st != http.StatusForbidden {
		t.Errorf("logout without a token: %d, want 403", st)
	}
}

// TestCrossSite sends state changes as another site's page would, with a
// valid session and token: the admin listener's cross-origin check
// refuses them before the console; a foreign Host is refused for any
// method (DNS rebinding).
func TestCrossSite(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.signedIn(console.User{Subject: "ada", Role: access.Admin})
	tests := []struct {
		name   string
		method string
		hdr    map[string]string
		host   string
		want   int
	}{
		{"foreign origin", http.MethodPost, map[string]string{"Origin": "https://evil.example"}, "", http.StatusForbidden},
		{"sec-fetch-site cross-site", http.MethodPost, map[string]string{"Sec-Fetch-Site": "cross-site"}, "", http.StatusForbidden},
		{"null origin", http.MethodPost, map[string]string{"Origin": "null"}, "", http.StatusForbidden},
		{"rebinding host, GET", http.MethodGet, nil, "evil.example", http.StatusForbidden},
		{"same origin", http.MethodPost, map[string]string{"Origin": b.base, "Sec-Fetch-Site": "same-origin"}, "", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var form url.Values
			if tt.method == http.MethodPost {
				form = url.Values{"sub": {"svc"}, "dept": {"eng"}, "csrf": {b.csrf}}
			}
			req := b.request(tt.method, "/ui/keys", form, tt.hdr)
			if tt.host != "" {
				req.Host = tt.host
			}
			st, _, body := b.send(req)
			if st != tt.want {
				t.Fatalf("status %d, want %d\n%s", st, tt.want, body)
			}
		})
	}
}

// TestSecurityHeaders checks the headers of every kind of answer: pages,
// the sign-in page, errors, refusals and static assets.
func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t, envOpts{})
	admin := e.signedIn(console.User{Subject: "ada", Role: access.Admin})
	viewer := e.signedIn(console.User{Subject: "vic", Role: access.Viewer, Dept: "eng"})
	anon := e.browser()
	tests := []struct {
		name   string
		b      *browser
		path   string
		status int
		page   bool
	}{
		{"overview (no data layer)", admin, "/ui/", http.StatusServiceUnavailable, true},
		{"budgets (no data layer)", admin, "/ui/budgets", http.StatusServiceUnavailable, true},
		{"requests (no data layer)", admin, "/ui/requests", http.StatusServiceUnavailable, true},
		{"models (no data layer)", admin, "/ui/models", http.StatusServiceUnavailable, true},
		{"keys", admin, "/ui/keys", http.StatusOK, true},
		{"audit", admin, "/ui/audit", http.StatusOK, true},
		{"login", anon, "/ui/login", http.StatusOK, true},
		{"signed out", anon, "/ui/keys", http.StatusSeeOther, true},
		{"refused", viewer, "/ui/audit", http.StatusForbidden, true},
		{"not found", admin, "/ui/nope", http.StatusNotFound, true},
		{"bad link", anon, "/ui/login/link?token=x", http.StatusUnauthorized, true},
		{"stylesheet", anon, "/ui/static/console.css", http.StatusOK, false},
		{"htmx", anon, "/ui/static/vendor/htmx/htmx.min.js", http.StatusOK, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, h, body := tt.b.get(tt.path)
			if st != tt.status {
				t.Fatalf("status %d, want %d\n%s", st, tt.status, body)
			}
			for k, v := range map[string]string{"Content-Security-Policy": console.CSP, "X-Content-Type-Options": "nosniff",
				"Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"} {
				if h.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, h.Get(k), v)
				}
			}
			if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
				t.Error("CSP lacks frame-ancestors 'none'")
			}
			if cc := h.Get("Cache-Control"); tt.page && cc != "no-store" {
				t.Errorf("Cache-Control %q on a page, want no-store", cc)
			}
			if tt.page && inlineCode.MatchString(body) {
				t.Errorf("page has inline script or style: %s", inlineCode.FindString(body))
			}
		})
	}
}

// inlineCode finds what the CSP would block: a script element with a
// body, a style element or attribute, an on* handler.
var inlineCode = regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]|<style|\sstyle=|\son[a-z]+=`)

// TestKeyLifecycle creates, rotates and revokes a key as a dept-admin:
// the secret shows once, the audit log names the console user as actor
// of each change, with the key before and after, and no page but the
// answer to the change holds the secret.
func TestKeyLifecycle(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.signedIn(console.User{Subject: "dana", Role: access.DeptAdmin, Dept: "eng"})
	st, _, body := b.post("/ui/keys", url.Values{"name": {"batch"}, "sub": {"svc-batch"}, "team": {"ml"}, "expires_at": {"2099-01-31"}})
	if st != http.StatusOK {
		t.Fatalf("create: %d\n%s", st, body)
	}
	secret := newSecret.FindStringSubmatch(body)
	if secret == nil {
		t.Fatalf("no #new-key-secret in the answer:\n%s", body)
	}
	list, err := e.keys.List(context.Background())
	if err != nil || len(list) != 1 {
		t.Fatalf("keys %+v, %v", list, err)
	}
	k := list[0]
	if k.Dept != "eng" || k.Subject != "svc-batch" || k.Team != "ml" || k.CreatedBy != "dana" || k.ExpiresAt.Format("2006-01-02") != "2099-01-31" {
		t.Errorf("stored key %+v", k)
	}
	_, _, page := b.get("/ui/keys")
	if strings.Contains(page, secret[1]) || !strings.Contains(page, `data-key-id="`+k.ID+`"`) {
		t.Errorf("the list shows the secret, or not the key")
	}
	st, _, body = b.post("/ui/keys/"+k.ID+"/rotate", nil)
	rotated := newSecret.FindStringSubmatch(body)
	if st != http.StatusOK || rotated == nil || rotated[1] == secret[1] {
		t.Fatalf("rotate: %d, new secret %v\n%s", st, rotated, body)
	}
	if st, h, _ := b.post("/ui/keys/"+k.ID+"/revoke", nil); st != http.StatusSeeOther || h.Get("Location") != "/ui/keys" {
		t.Fatalf("revoke: %d %q", st, h.Get("Location"))
	}
	_, _, page = b.get("/ui/keys")
	if !strings.Contains(page, `data-status="revoked"`) || strings.Contains(page, `class="revoke`) {
		t.Errorf("a revoked key is not shown revoked, or still offers revoke")
	}
	events, err := audit.List(context.Background(), e.js, e.now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]audit.Event{}
	for _, ev := range events {
		got[ev.Action] = ev
	}
	for _, action := range []string{audit.ActionKeyCreated, audit.ActionKeyRotated, audit.ActionKeyRevoked} {
		ev, ok := got[action]
		if !ok || ev.Actor != "dana" || ev.Target != "key:"+k.ID || len(ev.After) == 0 {
			t.Errorf("%s event %+v, want actor dana on key:%s with after", action, ev, k.ID)
		}
		if strings.Contains(string(ev.Before)+string(ev.After), secret[1]) || strings.Contains(string(ev.After), rotated[1]) {
			t.Errorf("%s event holds a secret", action)
		}
	}
	if ev := got[audit.ActionKeyRevoked]; len(ev.Before) == 0 {
		t.Errorf("revoke event without the key before")
	}
	// An admin sees it on the audit page.
	a := e.signedIn(console.User{Subject: "ada", Role: access.Admin})
	st, _, body = a.get("/ui/audit")
	if st != http.StatusOK || !strings.Contains(body, `id="audit-table"`) || !strings.Contains(body, `class="actor">dana<`) {
		t.Errorf("audit page: %d\n%s", st, body)
	}
}

var newSecret = regexp.MustCompile(`id="new-key-secret">([^<]+)<`)

// TestKeyFormRefusesBadInput sends hostile field values: each gets a 400
// page that says what is wrong, and no key.
func TestKeyFormRefusesBadInput(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.signedIn(console.User{Subject: "ada", Role: access.Admin})
	tests := []struct {
		name string
		form url.Values
		want string
	}{
		{"no subject", url.Values{"dept": {"eng"}}, "needs a subject"},
		{"no dept", url.Values{"sub": {"x"}}, "needs a subject (sub) and a department"},
		{"too long", url.Values{"sub": {strings.Repeat("x", 129)}, "dept": {"eng"}}, "at most 128"},
		{"control character", url.Values{"sub": {"a\x00b"}, "dept": {"eng"}}, "control characters"},
		{"bad expiry", url.Values{"sub": {"x"}, "dept": {"eng"}, "expires_at": {"soon"}}, "expires_at"},
		{"past expiry", url.Values{"sub": {"x"}, "dept": {"eng"}, "expires_at": {"2001-01-01"}}, "in the past"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, body := b.post("/ui/keys", tt.form)
			if st != http.StatusBadRequest || !strings.Contains(body, tt.want) || !strings.Contains(body, "error-state") {
				t.Fatalf("status %d, want 400 saying %q\n%s", st, tt.want, body)
			}
		})
	}
	if list, _ := e.keys.List(context.Background()); len(list) != 0 {
		t.Errorf("bad input made keys: %+v", list)
	}
}
