package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/procs"
)

func TestWaitReady(t *testing.T) {
	tests := []struct {
		name     string
		failures int32 // answers 503 this many times first
		proc     string
		timeout  time.Duration
		wantErr  string
	}{
		{name: "ready at once", timeout: time.Second},
		{name: "ready after a few tries", failures: 3, timeout: 2 * time.Second},
		{name: "never ready", failures: 1 << 30, timeout: 200 * time.Millisecond, wantErr: "not ready within"},
		{name: "process exits", failures: 1 << 30, proc: "echo boom; exit 3", timeout: 5 * time.Second, wantErr: "exited before it was ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer tok" || r.Method != http.MethodPost {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				if calls.Add(1) <= tt.failures {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
			}))
			defer srv.Close()
			var p *procs.Proc
			if tt.proc != "" {
				ps := &procs.Group{LogDir: t.TempDir()}
				var err error
				if p, err = ps.Start("child", procs.StartOptions{}, "/bin/sh", "-c", tt.proc); err != nil {
					t.Fatal(err)
				}
				defer ps.StopAll(stopGrace)
			}
			took, err := waitReady(context.Background(), p, probe{url: srv.URL, body: []byte(`{}`), token: "tok"}, time.Now(), tt.timeout, 5*time.Millisecond)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if took <= 0 || took > tt.timeout {
				t.Errorf("took %s", took)
			}
			if got := calls.Load(); got != tt.failures+1 {
				t.Errorf("%d calls, want %d", got, tt.failures+1)
			}
		})
	}
}

func TestSettle(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		max     time.Duration
		minWait time.Duration
	}{
		{"idle process settles at once", "sleep 30", 3 * time.Second, 0},
		{"busy process waits the maximum", "while :; do :; done", 700 * time.Millisecond, 700 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := &procs.Group{LogDir: t.TempDir()}
			p, err := ps.Start("child", procs.StartOptions{}, "/bin/sh", "-c", tt.script)
			if err != nil {
				t.Fatal(err)
			}
			defer ps.StopAll(stopGrace)
			got := settle(context.Background(), []int{p.PID()}, tt.max)
			if got < tt.minWait || got > tt.max+500*time.Millisecond {
				t.Errorf("settle waited %s, want between %s and %s", got, tt.minWait, tt.max)
			}
			if tt.minWait == 0 && got >= tt.max {
				t.Errorf("settle waited the maximum %s for an idle process", got)
			}
		})
	}
}

func TestRSS(t *testing.T) {
	mb, err := rssMB(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if mb <= 0 || mb > 4096 {
		t.Errorf("rss %v MiB", mb)
	}
	anon, err := anonMB(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if anon <= 0 || anon > mb {
		t.Errorf("anonymous rss %v MiB, total %v MiB", anon, mb)
	}
}
