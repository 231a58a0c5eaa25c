// Command bareproxy is the thinnest honest reverse proxy for the benchmark
// suite: the physical limit a Go proxy reaches on this machine, against
// which the gateway's overhead is measured. It does no auth, no accounting
// and no body edits, but it does what any real proxy must: forward the
// request with hop-by-hop headers removed, over a pooled keep-alive
// connection, relay fixed-length bodies as they are, relay streamed bodies
// chunk by chunk with a flush after every read, and close the upstream
// connection when the client goes away mid-stream.
//
//	go run ./scripts/bench/bareproxy -listen 127.0.0.1:8090 -upstream http://127.0.0.1:9999
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "bareproxy: %v\n", err)
		os.Exit(1)
	}
}

// run serves until ctx is done.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("bareproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8090", "listen `address`")
	upstream := fs.String("upstream", "http://127.0.0.1:9999", "upstream base `URL`")
	maxConns := fs.Int("max-conns", 16384, "cap on upstream connections")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := newProxy(*upstream, *maxConns)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := p.server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "bareproxy: %s -> %s\n", ln.Addr(), *upstream)
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.ShutdownWithContext(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return <-served
}

// proxy forwards every request to one upstream.
type proxy struct {
	client *fasthttp.HostClient
	relays sync.Pool // *relay; saves a 32 KiB buffer per response
}

func newProxy(upstream string, maxConns int) (*proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("parse upstream: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream %q: want http(s)://host:port", upstream)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	p := &proxy{client: &fasthttp.HostClient{
		Addr:                      addr,
		IsTLS:                     u.Scheme == "https",
		MaxConns:                  maxConns,
		MaxConnWaitTimeout:        5 * time.Second,
		MaxIdleConnDuration:       30 * time.Second,
		MaxIdemponentCallAttempts: 1,
		NoDefaultUserAgentHeader:  true,
		StreamResponseBody:        true,
	}}
	p.relays.New = func() any { return &relay{buf: make([]byte, 32<<10)} }
	return p, nil
}

func (p *proxy) server() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               p.handle,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		MaxRequestBodySize:    64 << 20,
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           120 * time.Second,
	}
}

func (p *proxy) handle(ctx *fasthttp.RequestCtx) {
	// Hop-by-hop headers are meaningful for one connection only (RFC 9110
	// 7.6.1) and are never forwarded. fasthttp itself handles Connection,
	// Content-Length and Transfer-Encoding.
	hopHeaders := [...]string{"Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer", "Upgrade"}
	req := fasthttp.AcquireRequest()
	ctx.Request.Header.CopyTo(&req.Header)
	req.Header.ResetConnectionClose()
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.SetBodyRaw(ctx.Request.Body()) // valid until the handler returns; Do is done by then
	resp := fasthttp.AcquireResponse()
	err := p.client.Do(req, resp)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		status := fasthttp.StatusBadGateway
		if errors.Is(err, fasthttp.ErrTimeout) {
			status = fasthttp.StatusGatewayTimeout
		}
		ctx.Response.Header.SetContentType("application/json")
		ctx.Response.SetStatusCode(status)
		ctx.Response.SetBodyString(`{"error":{"message":"upstream unavailable","type":"upstream_error","param":null,"code":null}}`)
		return
	}
	resp.Header.CopyTo(&ctx.Response.Header)
	ctx.Response.Header.ResetConnectionClose()
	for _, h := range hopHeaders {
		ctx.Response.Header.Del(h)
	}
	if resp.BodyStream() == nil { // no body: HEAD, 204, 304
		fasthttp.ReleaseResponse(resp)
		return
	}
	r := p.relays.Get().(*relay) //nolint:forcetypeassert // only relays are put
	r.resp, r.pool = resp, &p.relays
	// A known length is relayed as it is; otherwise (chunked, or until
	// close) the server writes each read as a chunk and flushes it.
	ctx.Response.SetBodyStream(r, max(resp.Header.ContentLength(), -1))
}

// relay is the body stream of a proxied response. The server reads it
// through WriteTo: read up to 32 KiB from the upstream, write, and (for a
// chunked body) flush, until the upstream ends. The server closes it when
// the body is done or the client is gone; the upstream connection is then
// pooled if the body was read to its end, and closed otherwise.
type relay struct {
	resp *fasthttp.Response
	buf  []byte
	pool *sync.Pool
}

// Read reads the upstream body.
func (r *relay) Read(p []byte) (int, error) { return r.resp.BodyStream().Read(p) }

// SupportsBodyWriteTo tells fasthttp that WriteTo does what Read does.
func (r *relay) SupportsBodyWriteTo() bool { return true }

// WriteTo copies the upstream body to w one read at a time; fasthttp's
// chunked writer flushes each write.
func (r *relay) WriteTo(w io.Writer) (int64, error) {
	src := r.resp.BodyStream()
	var total int64
	for {
		n, err := src.Read(r.buf)
		if n > 0 {
			m, werr := w.Write(r.buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr // client gone
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err // upstream cut: the client sees a cut body too
		}
	}
}

// CloseWithError releases the upstream response; err is why the server
// stopped (nil when the body was written completely).
func (r *relay) CloseWithError(err error) error {
	var cerr error
	if rc, ok := r.resp.BodyStream().(fasthttp.ReadCloserWithError); ok {
		cerr = rc.CloseWithError(err)
	}
	fasthttp.ReleaseResponse(r.resp)
	pool := r.pool
	r.resp, r.pool = nil, nil
	pool.Put(r)
	return cerr
}
