package console_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/console"
	"github.com/tollgate/tollgate/pkg/natstest"
)

// env is a console served by a real admin listener on a loopback port,
// with its sessions, API keys and audit log in an embedded NATS server.
type env struct {
	t       testing.TB
	base    string // http://127.0.0.1:port
	c       *console.Console
	js      jetstream.JetStream
	keys    *apikey.Store
	cfg     atomic.Pointer[config.Config]
	elapsed atomic.Int64 // nanoseconds the test clock is ahead of the real one
}

// now is the test clock.
func (e *env) now() time.Time { return time.Now().Add(time.Duration(e.elapsed.Load())) }

// advance moves the test clock forward.
func (e *env) advance(d time.Duration) { e.elapsed.Add(int64(d)) }

type envOpts struct {
	cfg    *config.Config
	listen func(t testing.TB) net.Listener // default: 127.0.0.1:0
	client *http.Client                    // the console's client to the provider
	memory bool                            // sessions in memory, not in the KV bucket
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{t: t}
	cfg := o.cfg
	if cfg == nil {
		cfg = &config.Config{}
	}
	cfg.ApplyDefaults()
	e.cfg.Store(cfg)
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.js = js
	ctx := context.Background()
	rec := audit.NewRecorder(js, audit.Options{Now: e.now})
	kv, err := apikey.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	e.keys = apikey.NewStore(kv, e.now, rec)
	co := console.Options{
		Config: e.cfg.Load, Keys: e.keys, Audit: rec, Now: e.now, HTTPClient: o.client,
		AuditLog: func(ctx context.Context, since time.Time) ([]audit.Event, error) { return audit.List(ctx, js, since) },
	}
	if !o.memory {
		sess, err := console.EnsureSessions(ctx, js, cfg.Console.SessionTTL, 1)
		if err != nil {
			t.Fatal(err)
		}
		co.Sessions = sess
	}
	e.c, err = console.New(co)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if o.listen != nil {
		ln = o.listen(t)
	} else if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	srv := admin.New(admin.Options{Console: e.c})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	e.base = "http://" + ln.Addr().String()
	return e
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so tests see each 303.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
	csrf string
	// callback is the path of the last OIDC callback signInOIDC followed.
	callback string
}

func (e *env) browser() *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return &browser{t: e.t, base: e.base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// signedIn is a browser with a session for u.
func (e *env) signedIn(u console.User) *browser {
	b := e.browser()
	id, csrf, err := e.c.NewSessionForTest(context.Background(), u)
	if err != nil {
		e.t.Fatal(err)
	}
	b.setCookie(console.SessionCookie, id)
	b.csrf = csrf
	return b
}

func (b *browser) setCookie(name, value string) {
	u, _ := url.Parse(b.base + "/ui/")
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: name, Value: value, Path: "/ui/"}})
}

// request builds a request to the console.
func (b *browser) request(method, path string, form url.Values, hdr map[string]string) *http.Request {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// send sends req and returns the status, headers and body.
func (b *browser) send(req *http.Request) (int, http.Header, string) {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(rb)
}

// do sends a request and returns the status, headers and body.
func (b *browser) do(method, path string, form url.Values, hdr map[string]string) (int, http.Header, string) {
	b.t.Helper()
	return b.send(b.request(method, path, form, hdr))
}

func (b *browser) get(path string) (int, http.Header, string) {
	b.t.Helper()
	return b.do(http.MethodGet, path, nil, nil)
}

// post sends form with the browser's CSRF token and a same-origin Origin.
func (b *browser) post(path string, form url.Values) (int, http.Header, string) {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", b.csrf)
	return b.do(http.MethodPost, path, form, map[string]string{"Origin": b.base})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func replace(s, from, to string) string { return strings.ReplaceAll(s, from, to) }
