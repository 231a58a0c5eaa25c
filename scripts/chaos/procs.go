package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/tollgate/tollgate/pkg/procs"
)

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var out []int
	for len(out) < n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// waitFor calls ok every 50 ms until it returns true, p exits, ctx ends or
// timeout passes.
func waitFor(ctx context.Context, what string, p *procs.Proc, timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited before it was ready:\n%s", p.Name(), p.LogTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// httpOK reports whether GET url answers 200.
func httpOK(url string) bool {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
