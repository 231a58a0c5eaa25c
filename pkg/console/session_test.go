package console_test

import (
	"bytes"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/console"
)

// printLink prints a link as the gateway does at start and returns its path.
func (e *env) printLink(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	addr, err := net.ResolveTCPAddr("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.PrintLink(&out, addr, false); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`http://\S+/ui/login/link\?token=\S+`).FindString(out.String())
	if m == "" {
		t.Fatalf("no link in %q", out.String())
	}
	return strings.TrimPrefix(m, e.base)
}

// TestLinkOnce signs in with the one-time link: it works once, as
// local-admin with the role admin, and its session cookie is HttpOnly
// and SameSite=Lax.
func TestLinkOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	link := e.printLink(t)
	b := e.browser()
	st, h, body := b.get(link)
	if st != http.StatusSeeOther || h.Get("Location") != "/ui/" {
		t.Fatalf("link: %d %q\n%s", st, h.Get("Location"), body)
	}
	ck := h.Get("Set-Cookie")
	for _, want := range []string{console.SessionCookie + "=", "HttpOnly", "SameSite=Lax", "Path=/ui/"} {
		if !strings.Contains(ck, want) {
			t.Errorf("session cookie %q lacks %s", ck, want)
		}
	}
	if strings.Contains(ck, "Secure") {
		t.Errorf("a cookie over plain http on loopback is marked Secure: %q", ck)
	}
	_, _, body = b.get("/ui/keys")
	if !strings.Contains(body, `data-sub="local-admin" data-role="admin"`) {
		t.Fatalf("not signed in as local-admin:\n%s", body)
	}
	// A second sign-in in the same browser ends the first session.
	u, _ := url.Parse(e.base + "/ui/")
	first := b.c.Jar.Cookies(u)
	if st, _, _ := b.get(e.printLink(t)); st != http.StatusSeeOther {
		t.Fatalf("second link: %d", st)
	}
	replay := e.browser()
	replay.c.Jar.SetCookies(u, first)
	if st, _, _ := replay.get("/ui/keys"); st != http.StatusSeeOther {
		t.Errorf("the session before a new sign-in still works: %d", st)
	}
	// Used: a second browser (or the same one again) is refused.
	for _, again := range []*browser{e.browser(), b} {
		if st, _, body := again.get(link); st != http.StatusUnauthorized || !strings.Contains(body, "error-state") {
			t.Errorf("second use: %d, want 401 with the error page", st)
		}
	}
}

// TestLinkExpires: a link older than 10 minutes no longer works.
func TestLinkExpires(t *testing.T) {
	e := newEnv(t, envOpts{})
	link := e.printLink(t)
	e.advance(console.LinkTTL + time.Second)
	if st, _, _ := e.browser().get(link); st != http.StatusUnauthorized {
		t.Fatalf("expired link: %d, want 401", st)
	}
	fresh := e.printLink(t)
	e.advance(console.LinkTTL - time.Minute)
	if st, _, _ := e.browser().get(fresh); st != http.StatusSeeOther {
		t.Fatalf("a link 9 minutes old: %d, want 303", st)
	}
}

// TestLinkOffLoopback serves the console on a listener that is not on a
// loopback address (as a Service IP would be): a valid link is refused,
// and PrintLink prints none for such a listener.
func TestLinkOffLoopback(t *testing.T) {
	e := newEnv(t, envOpts{listen: func(t testing.TB) net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return publicListener{ln}
	}})
	link, err := e.c.SignInLink("http://" + strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	st, _, body := e.browser().get(strings.TrimPrefix(link, e.base))
	if st != http.StatusForbidden || !strings.Contains(body, "loopback") {
		t.Fatalf("link off loopback: %d, want 403\n%s", st, body)
	}
	var out bytes.Buffer
	if err := e.c.PrintLink(&out, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 9090}, false); err != nil || out.Len() != 0 {
		t.Errorf("PrintLink off loopback wrote %q, %v", out.String(), err)
	}
	if err := e.c.PrintLink(&out, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9090}, true); err != nil || out.Len() != 0 {
		t.Errorf("PrintLink with admin.require_token wrote %q, %v", out.String(), err)
	}
}

// publicListener is a real loopback listener whose connections say they
// arrived on 192.0.2.10 (TEST-NET-1), as on a listener bound to a
// machine's public address.
type publicListener struct{ net.Listener }

var publicAddr = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 9090}

func (l publicListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return publicConn{c}, nil
}

type publicConn struct{ net.Conn }

func (publicConn) LocalAddr() net.Addr { return publicAddr }

// TestSessionExpiry: a session ends after console.session_ttl.
func TestSessionExpiry(t *testing.T) {
	e := newEnv(t, envOpts{cfg: &config.Config{Console: config.Console{SessionTTL: time.Hour}}})
	b := e.signedIn(console.User{Subject: "ada", Role: access.Admin})
	if st, _, _ := b.get("/ui/keys"); st != http.StatusOK {
		t.Fatalf("fresh session: %d", st)
	}
	e.advance(59 * time.Minute)
	if st, _, _ := b.get("/ui/keys"); st != http.StatusOK {
		t.Fatalf("session 59 minutes old: %d", st)
	}
	e.advance(2 * time.Minute)
	if st, h, _ := b.get("/ui/keys"); st != http.StatusSeeOther || h.Get("Location") != "/ui/login" {
		t.Fatalf("expired session: %d %q, want 303 to /ui/login", st, h.Get("Location"))
	}
	if st, _, _ := b.post("/ui/keys", url.Values{"sub": {"x"}, "dept": {"eng"}}); st != http.StatusUnauthorized {
		t.Fatalf("POST with an expired session: %d, want 401", st)
	}
}

// TestLogout ends the session on the server: the old cookie, replayed,
// no longer signs anyone in.
func TestLogout(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.signedIn(console.User{Subject: "ada", Role: access.Admin})
	u, _ := url.Parse(e.base + "/ui/")
	old := b.c.Jar.Cookies(u)
	replay := e.browser()
	replay.c.Jar.SetCookies(u, old)
	if st, _, _ := replay.get("/ui/keys"); st != http.StatusOK {
		t.Fatalf("the copied cookie before logout: %d, want 200", st)
	}
	st, h, _ := b.post("/ui/logout", nil)
	if st != http.StatusSeeOther || h.Get("Location") != "/ui/login" {
		t.Fatalf("logout: %d %q", st, h.Get("Location"))
	}
	if !strings.Contains(h.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("logout does not clear the cookie: %q", h.Get("Set-Cookie"))
	}
	if st, _, _ := replay.get("/ui/keys"); st != http.StatusSeeOther {
		t.Fatalf("the old cookie after logout: %d, want 303 to sign-in", st)
	}
}

// TestSessionsInMemory: without a KV bucket sessions live in the
// process, with the same expiry and logout.
func TestSessionsInMemory(t *testing.T) {
	e := newEnv(t, envOpts{memory: true, cfg: &config.Config{Console: config.Console{SessionTTL: time.Hour}}})
	b := e.browser()
	if st, _, _ := b.get(e.printLink(t)); st != http.StatusSeeOther {
		t.Fatalf("link: %d", st)
	}
	st, _, body := b.get("/ui/keys")
	if st != http.StatusOK {
		t.Fatalf("signed in: %d", st)
	}
	b.csrf = regexp.MustCompile(`name="csrf-token" content="([^"]+)"`).FindStringSubmatch(body)[1]
	if st, _, _ := b.post("/ui/logout", nil); st != http.StatusSeeOther {
		t.Fatalf("logout: %d", st)
	}
	if st, _, _ := b.get("/ui/keys"); st != http.StatusSeeOther {
		t.Fatalf("after logout: %d", st)
	}
	s := e.signedIn(console.User{Subject: "ada", Role: access.Admin})
	e.advance(time.Hour)
	if st, _, _ := s.get("/ui/keys"); st != http.StatusSeeOther {
		t.Fatalf("an expired session in memory: %d", st)
	}
}

// TestSecureCookieBehindTLS: with an https redirect URL (a TLS proxy in
// front of the admin listener) the session cookie is Secure.
func TestSecureCookieBehindTLS(t *testing.T) {
	e := newEnv(t, envOpts{cfg: &config.Config{Console: config.Console{OIDC: config.ConsoleOIDC{RedirectURL: "https://gw.example.com/ui/callback"}}}})
	_, h, _ := e.browser().get(e.printLink(t))
	if ck := h.Get("Set-Cookie"); !strings.Contains(ck, "Secure") || !strings.Contains(ck, "HttpOnly") {
		t.Fatalf("session cookie %q, want Secure and HttpOnly", ck)
	}
}
