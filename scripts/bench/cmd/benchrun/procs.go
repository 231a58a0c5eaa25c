package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/pkg/loadgen"
	"github.com/tollgate/tollgate/pkg/procs"
)

// stopGrace is how long a process has to exit after SIGTERM before it is
// killed.
const stopGrace = 5 * time.Second

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port //nolint:forcetypeassert // tcp listener
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// probe is one readiness request: the process is ready when it answers 200.
type probe struct {
	url   string
	body  []byte // POST when set, else GET
	token string
}

// waitReady polls pr every interval until it answers 200, p exits, or
// timeout passes. It returns the time from since to the first 200.
func waitReady(ctx context.Context, p *procs.Proc, pr probe, since time.Time, timeout, interval time.Duration) (time.Duration, error) {
	// A fresh connection per attempt: a refused dial must not be reused.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p != nil && p.Exited() {
			return 0, fmt.Errorf("%s exited before it was ready: %v\n%s", p.Name(), p.Err(), p.LogTail())
		}
		status, err := get(ctx, client, pr)
		if err == nil && status == http.StatusOK {
			return time.Since(since), nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("status %d", status)
		}
		if time.Now().After(deadline) {
			name := "process"
			if p != nil {
				name = p.Name()
			}
			return 0, fmt.Errorf("%s not ready within %s (%s: %v)", name, timeout, pr.url, last)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(interval):
		}
	}
}

func get(ctx context.Context, client *http.Client, pr probe) (int, error) {
	method := http.MethodGet
	var body io.Reader
	if pr.body != nil {
		method, body = http.MethodPost, bytes.NewReader(pr.body)
	}
	req, err := http.NewRequestWithContext(ctx, method, pr.url, body)
	if err != nil {
		return 0, fmt.Errorf("build probe: %w", err)
	}
	if pr.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if pr.token != "" {
		req.Header.Set("Authorization", "Bearer "+pr.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// settle waits until the given processes have been nearly idle (at most
// one scheduler tick of CPU time per 200 ms) or max has passed, so work
// left over from one run (usage events still being folded, connections
// closing) does not steal CPU from the next. It returns how long it waited.
func settle(ctx context.Context, pids []int, limit time.Duration) time.Duration {
	start := time.Now()
	cpu := func() time.Duration {
		var total time.Duration
		for _, pid := range pids {
			if st, err := loadgen.ReadProc(pid); err == nil {
				total += st.CPU
			}
		}
		return total
	}
	prev := cpu()
	for time.Since(start) < limit {
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(200 * time.Millisecond):
		}
		now := cpu()
		if now-prev <= 10*time.Millisecond {
			break
		}
		prev = now
	}
	return time.Since(start)
}

// rssMB reads the resident set size of pid in MiB.
func rssMB(pid int) (float64, error) {
	st, err := loadgen.ReadProc(pid)
	if err != nil {
		return 0, err
	}
	return float64(st.RSS) / (1 << 20), nil
}

// anonMB reads the anonymous part of pid's resident set in MiB (RssAnon):
// heap, stacks and runtime memory, without the program's file-backed
// pages (code and read-only data, shared with the page cache).
func anonMB(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read proc status: %w", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("RssAnon:")); ok {
			v = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))
			kb, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse RssAnon %q: %w", v, err)
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, fmt.Errorf("no RssAnon in /proc/%d/status", pid)
}

// itoa is strconv.Itoa, short for argument lists.
func itoa(n int) string { return strconv.Itoa(n) }
