package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/registry"
	"github.com/valyala/fasthttp"
)

// upstreamReadBuf is each upstream connection's read buffer. It also bounds
// an answer's status line and headers (fasthttp fails a longer head as a
// transport error, reported as upstream_error). Providers send 1-3 KiB of
// headers. A streamed answer holds its connection's buffer for the whole
// stream, so this is most of what a held stream costs.
const upstreamReadBuf = 8 << 10

// upstream is one provider: its wire protocol and its pooled connections.
type upstream struct {
	name      string
	kind      string         // the config's kind, as traces and errors name it
	caps      *registry.Kind // what the kind speaks and how it authenticates
	prov      providers.Provider
	hc        *fasthttp.HostClient
	hasKey    bool
	secrets   []string // to scrub from upstream error text
	apiKeyEnv string
	timeouts  config.Timeouts
	legs      legTransport // hands hedged calls their connection
	dial      *dialer
	pass      *passTarget // OpenAI endpoints passed through; nil when the kind has none
}

func newUpstream(p config.Provider) (*upstream, error) {
	caps, ok := registry.Lookup(p.Kind)
	if !ok {
		return nil, fmt.Errorf("provider %s: unknown kind %q", p.Name, p.Kind)
	}
	prov, err := caps.New(p)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(caps.BaseURL(p))
	if err != nil {
		return nil, fmt.Errorf("provider %s: parse base_url: %w", p.Name, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("provider %s: base_url scheme %q is not http or https", p.Name, u.Scheme)
	}
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	up := &upstream{
		name:      p.Name,
		kind:      p.Kind,
		caps:      caps,
		prov:      prov,
		hasKey:    caps.HasKey(p),
		apiKeyEnv: p.APIKeyEnv,
		timeouts:  p.Timeouts,
		pass:      newPassTarget(p, caps, u),
	}
	for _, s := range []string{p.APIKey, p.SecretAccessKey, p.SessionToken} {
		if len(s) >= 8 { // shorter strings would scrub ordinary words
			up.secrets = append(up.secrets, s)
		}
	}
	d := &dialer{net: net.Dialer{Timeout: p.Timeouts.Connect, KeepAlive: 30 * time.Second}}
	if u.Scheme == "https" {
		d.tls = &tls.Config{ServerName: u.Hostname()}
	}
	up.dial = d
	up.hc = &fasthttp.HostClient{
		Addr:                addr,
		IsTLS:               d.tls != nil,
		Name:                "tollgate",
		Dial:                d.dial,
		MaxConns:            p.MaxConns,
		MaxIdleConnDuration: p.MaxIdleConnDuration,
		MaxResponseBodySize: p.MaxResponseBody,
		// The one transport-level retry: a pooled keep-alive connection
		// that the server closed before answering (it never saw the
		// request) is replaced once. Every other retry is a routing
		// decision, made visibly by the router.
		MaxIdemponentCallAttempts: 2,
		RetryIfErr: func(_ *fasthttp.Request, attempts int, err error) (bool, bool) {
			return false, attempts == 1 && staleConn(err)
		},
		Transport:              &up.legs,
		ReadBufferSize:         upstreamReadBuf,
		WriteBufferSize:        16 << 10,
		DisablePathNormalizing: true,
	}
	return up, nil
}

// setKey replaces the credentials Build wrote with key, one of a target's
// api_keys in rotation (a no-op for kinds whose credentials are not keys).
func (u *upstream) setKey(req *fasthttp.Request, key string) {
	u.caps.SetKey(req, key)
}

// dialer opens the connections of one upstream.
type dialer struct {
	net net.Dialer
	tls *tls.Config // nil for plain HTTP
}

// dialed is the outcome of one dial.
type dialed struct {
	conn net.Conn
	err  error
}

// dial opens a connection to addr on a goroutine of its own and waits for
// it. A connect, and a TLS handshake far more, run deep: on the serving
// goroutine they would grow its stack to 16-32 KiB, and a goroutine keeps
// the stack it grew, so every request that opened a connection would hold
// that stack for the rest of its life (a held stream: minutes), and a
// keep-alive connection's goroutine after it. On a goroutine of its own,
// that stack is freed when the dial returns. Dials are rare next to
// requests (connections are pooled), so the goroutine costs nothing on
// the steady path.
func (d *dialer) dial(addr string) (net.Conn, error) {
	ch := make(chan dialed, 1)
	go func() {
		c, err := d.open(addr)
		ch <- dialed{c, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// open opens a connection to addr and, for a TLS upstream, completes the
// handshake, both within timeouts.connect. fasthttp takes a connection
// that has a Handshake method as TLS already; left to it, the handshake
// would run on the first write, bounded by no connect timeout.
func (d *dialer) open(addr string) (net.Conn, error) {
	ctx := context.Background()
	if d.net.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.net.Timeout)
		defer cancel()
	}
	c, err := d.net.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := newTrackedConn(c)
	if d.tls == nil {
		return tc, nil
	}
	tlsc := tls.Client(tc, d.tls)
	if err := tlsc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		// A dial error, as the router and classify take it: a connect
		// failure, a timeout when the handshake ran out of time.
		return nil, fmt.Errorf("tls handshake: %w", &net.OpError{Op: "dial", Net: "tcp", Addr: c.RemoteAddr(), Err: err})
	}
	return tlsc, nil
}

// staleConn reports whether err is how a reused keep-alive connection that
// the server had already closed fails: before any response byte.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// trackedConn lets the relay set per-read deadlines on the upstream
// connection that serves a streamed response: fasthttp hands back the
// connection's LocalAddr on the response, and ours carries the connection.
type trackedConn struct {
	net.Conn
	addr *connAddr
	// hook, while a relay writes a stream from this connection to its
	// client, runs before each read from the socket: the relay writes
	// what it holds (events already read go out together, and none waits
	// for the network) and arms the read's idle deadline.
	hook readHook
}

// readHook runs before a read from the socket; an error aborts the read.
type readHook interface{ beforeRead() error }

// Read reads from the socket, after the hook.
func (c *trackedConn) Read(p []byte) (int, error) {
	if c.hook != nil {
		if err := c.hook.beforeRead(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

type connAddr struct {
	net.Addr
	conn *trackedConn
}

func newTrackedConn(c net.Conn) *trackedConn {
	t := &trackedConn{Conn: c}
	t.addr = &connAddr{Addr: c.LocalAddr(), conn: t}
	return t
}

// LocalAddr returns the local address, which also identifies this conn.
func (c *trackedConn) LocalAddr() net.Addr { return c.addr }

// connOf returns the tracked connection a response was read from, or nil.
func connOf(resp *fasthttp.Response) *trackedConn {
	if a, ok := resp.LocalAddr().(*connAddr); ok {
		return a.conn
	}
	return nil
}

// classify maps an upstream transport error to the client's answer.
func (u *upstream) classify(err error) *apiError {
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return &apiError{Status: fasthttp.StatusGatewayTimeout, Type: typeTimeout, Code: "upstream_timeout",
			Message: fmt.Sprintf("provider %s did not answer in time", u.name)}
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return &apiError{Status: fasthttp.StatusServiceUnavailable, Type: typeUnavailable, Code: "upstream_connection_limit",
			Message: fmt.Sprintf("provider %s: connection limit reached", u.name)}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &apiError{Status: fasthttp.StatusBadGateway, Type: typeUpstream, Code: "upstream_unreachable",
			Message: fmt.Sprintf("provider %s refused the connection", u.name)}
	case errors.As(err, new(*fasthttp.ErrSmallBuffer)):
		return &apiError{Status: fasthttp.StatusBadGateway, Type: typeUpstream, Code: "upstream_error",
			Message: fmt.Sprintf("provider %s answered with a status line and headers over %d KiB", u.name, upstreamReadBuf>>10)}
	default:
		return &apiError{Status: fasthttp.StatusBadGateway, Type: typeUpstream, Code: "upstream_error",
			Message: fmt.Sprintf("provider %s: %s", u.name, u.scrub(err.Error()))}
	}
}

// scrub removes the provider key from text that came from upstream.
func (u *upstream) scrub(s string) string {
	for _, k := range u.secrets {
		s = strings.ReplaceAll(s, k, "[redacted]")
	}
	return s
}
