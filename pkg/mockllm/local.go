package mockllm

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
)

// ErrNotOpen is returned by Local.URL before Open.
var ErrNotOpen = errors.New("the mock upstream was not started")

// Local is the in-process mock upstream that serves the gateway's
// providers of kind mock: one Server on a loopback port, opened by the
// first call to Open (the port is known before the config that needs it is
// built) and served by Serve. The zero value is ready to use.
type Local struct {
	mu     sync.Mutex
	ln     net.Listener // guarded by mu; nil until Open
	srv    *Server      // guarded by mu; set by Serve
	closed bool         // guarded by mu; set by Shutdown
}

// Open listens on 127.0.0.1 (a free port) on first call and returns the
// base URL of the mock's OpenAI API, http://127.0.0.1:PORT/v1.
func (l *Local) Open() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("listen for the mock upstream: %w", err)
		}
		l.ln = ln
	}
	return l.url(), nil
}

// URL returns the base URL once Open has succeeded, else ErrNotOpen.
func (l *Local) URL() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return "", ErrNotOpen
	}
	return l.url(), nil
}

func (l *Local) url() string { return "http://" + l.ln.Addr().String() + "/v1" }

// Addr returns the listener's address, or "" before Open.
func (l *Local) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return ""
	}
	return l.ln.Addr().String()
}

// Serve answers on the opened listener until Shutdown, then returns nil.
// Without Open, or after Shutdown, it returns nil at once. log receives
// the HTTP server's own messages at debug level.
func (l *Local) Serve(log *slog.Logger) error {
	l.mu.Lock()
	if l.ln == nil || l.closed {
		l.mu.Unlock()
		return nil
	}
	l.srv = New(Config{Logger: log})
	srv, ln := l.srv, l.ln
	l.mu.Unlock()
	return srv.Serve(ln)
}

// Shutdown stops the server (see Server.Shutdown), or closes the listener
// when Serve has not started. Later calls do nothing.
func (l *Local) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	switch {
	case l.srv != nil:
		return l.srv.Shutdown()
	case l.ln != nil:
		return l.ln.Close()
	}
	return nil
}
