package console

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
)

// LinkTTL is how long a one-time sign-in link works.
const LinkTTL = 10 * time.Minute

// LinkSubject is the subject of a user signed in by a one-time link.
const LinkSubject = "local-admin"

// maxLinks bounds the links waiting to be used.
const maxLinks = 64

// links are the one-time sign-in links not used yet, by the SHA-256 of
// their token, with their expiry. They live in this process only: a link
// is printed by a gateway for its own loopback listener.
type links struct {
	now func() time.Time
	mu  sync.Mutex // guards m
	m   map[[32]byte]time.Time
}

func newLinks(now func() time.Time) *links {
	return &links{now: now, m: map[[32]byte]time.Time{}}
}

// SignInLink returns a one-time link signing its first user in as
// LinkSubject with the role admin, for the operator of `make run`: base
// is the admin listener's URL ("http://127.0.0.1:9090"). It works once,
// for LinkTTL, and only when the request reaches the console on a
// loopback address. Print it only for a loopback admin listener.
func (c *Console) SignInLink(base string) (string, error) {
	tok, err := randomID()
	if err != nil {
		return "", err
	}
	l := c.links
	l.mu.Lock()
	now := l.now()
	for h, exp := range l.m {
		if !now.Before(exp) {
			delete(l.m, h)
		}
	}
	if len(l.m) >= maxLinks {
		l.mu.Unlock()
		return "", errTooManyLinks
	}
	l.m[sha256.Sum256([]byte(tok))] = now.Add(LinkTTL)
	l.mu.Unlock()
	return strings.TrimSuffix(base, "/") + Prefix + "login/link?token=" + url.QueryEscape(tok), nil
}

type linkError string

func (e linkError) Error() string { return string(e) }

const errTooManyLinks = linkError("console: too many unused sign-in links")

// take uses up tok: true when it was a link not used before and not
// expired.
func (l *links) take(tok string) bool {
	h := sha256.Sum256([]byte(tok))
	l.mu.Lock()
	defer l.mu.Unlock()
	exp, ok := l.m[h]
	delete(l.m, h)
	return ok && l.now().Before(exp)
}

// onLoopback reports whether r reached this process on a loopback
// address from a loopback address.
func onLoopback(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	if a, ok := la.(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// linkSignIn serves GET /ui/login/link?token=...
func (c *Console) linkSignIn(w http.ResponseWriter, r *http.Request) {
	if !onLoopback(r) {
		c.log.Warn("console sign-in link refused off loopback", "remote", r.RemoteAddr)
		c.fail(w, r, http.StatusForbidden, "Sign-in links work only on a loopback admin listener: sign in with your identity provider.")
		return
	}
	tok := r.URL.Query().Get("token")
	if tok == "" || len(tok) > 64 || !c.links.take(tok) {
		c.fail(w, r, http.StatusUnauthorized, "This sign-in link is not valid: it was used already, it expired (links last 10 minutes), or it was mistyped. Restart the gateway for a new one.")
		return
	}
	c.signIn(w, r, User{Subject: LinkSubject, Name: "Local administrator", Role: access.Admin}, "link")
}

// PrintLink writes the one-time sign-in link for the admin listener at
// addr to w (the gateway's start banner) when addr is a loopback address
// and the listener needs no admin token (requireToken false: no sidecar
// shares the loopback interface); it writes nothing otherwise.
func (c *Console) PrintLink(w io.Writer, addr net.Addr, requireToken bool) error {
	a, ok := addr.(*net.TCPAddr)
	if !ok || !a.IP.IsLoopback() || requireToken {
		return nil
	}
	link, err := c.SignInLink("http://" + a.String())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "Console: open this one-time sign-in link (it works once, for 10 minutes, on this machine):\n\n  %s\n\n", link)
	return err
}
