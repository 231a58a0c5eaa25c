package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/valyala/fasthttp"
)

// upstream is one provider endpoint with its pooled connections.
type upstream struct {
	name      string
	kind      string
	hc        *fasthttp.HostClient
	scheme    string
	host      string
	paths     [len(upstreamPath)][]byte // base path + endpoint path, per endpoint
	auth      []byte                    // "Bearer <key>": a secret, never logged or echoed
	apiKey    []byte                    // the bare key, to scrub from upstream error text
	apiKeyEnv string
	timeouts  config.Timeouts
}

func newUpstream(p config.Provider) (*upstream, error) {
	u, err := url.Parse(p.BaseURL)
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
		scheme:    u.Scheme,
		host:      u.Host,
		apiKeyEnv: p.APIKeyEnv,
		timeouts:  p.Timeouts,
	}
	for ep, path := range upstreamPath {
		up.paths[ep] = append([]byte(trimSlash(u.Path)), path...)
	}
	if p.APIKey != "" {
		up.apiKey = []byte(p.APIKey)
		up.auth = []byte("Bearer " + p.APIKey)
	}
	dialer := &net.Dialer{Timeout: p.Timeouts.Connect, KeepAlive: 30 * time.Second}
	up.hc = &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: u.Scheme == "https",
		Name:  "tollgate",
		Dial: func(addr string) (net.Conn, error) {
			c, err := dialer.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return newTrackedConn(c), nil
		},
		MaxConns:            p.MaxConns,
		MaxIdleConnDuration: p.MaxIdleConnDuration,
		MaxResponseBodySize: p.MaxResponseBody,
		// No transport-level retries: a retry is a routing decision, made
		// visibly by the router, never silently here.
		MaxIdemponentCallAttempts: 1,
		RetryIfErr:                func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		ReadBufferSize:            16 << 10,
		WriteBufferSize:           16 << 10,
		DisablePathNormalizing:    true,
	}
	return up, nil
}

func trimSlash(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}

// prepare fills req for a POST to the endpoint under the provider's base URL.
func (u *upstream) prepare(req *fasthttp.Request, ep endpoint, requestID []byte) {
	req.Header.SetMethod(fasthttp.MethodPost)
	uri := req.URI()
	uri.SetScheme(u.scheme)
	uri.SetHost(u.host)
	uri.SetPathBytes(u.paths[ep])
	req.Header.SetContentTypeBytes(mimeJSON)
	if u.auth != nil {
		req.Header.SetBytesV(fasthttp.HeaderAuthorization, u.auth)
	}
	if len(requestID) > 0 {
		req.Header.SetBytesV(headerRequestID, requestID)
	}
}

var mimeJSON = []byte("application/json")

// trackedConn lets the relay set per-read deadlines on the upstream
// connection that serves a streamed response: fasthttp hands back the
// connection's LocalAddr on the response, and ours carries the connection.
type trackedConn struct {
	net.Conn
	addr *connAddr
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
	default:
		return &apiError{Status: fasthttp.StatusBadGateway, Type: typeUpstream, Code: "upstream_error",
			Message: fmt.Sprintf("provider %s: %s", u.name, u.scrub(err.Error()))}
	}
}

// scrub removes the provider key from text that came from upstream.
func (u *upstream) scrub(s string) string {
	if len(u.apiKey) == 0 {
		return s
	}
	return replaceAll(s, string(u.apiKey), "[redacted]")
}
