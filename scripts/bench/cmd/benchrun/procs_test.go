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
)

func TestProcStop(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		grace   time.Duration
		wantErr bool
	}{
		{"exits on SIGTERM", "sleep 30", 5 * time.Second, false},
		{"ignores SIGTERM and is killed", "trap '' TERM; while :; do sleep 0.05; done", 200 * time.Millisecond, true},
		{"already exited", "exit 0", time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := &procs{logDir: t.TempDir()}
			p, err := ps.start("child", "", nil, "/bin/sh", "-c", tt.script)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // let the shell install its trap
			start := time.Now()
			err = p.stop(tt.grace)
			if (err != nil) != tt.wantErr {
				t.Errorf("stop: %v, want error %v", err, tt.wantErr)
			}
			if !p.exited() {
				t.Fatal("process still running after stop")
			}
			if took := time.Since(start); took > tt.grace+2*time.Second {
				t.Errorf("stop took %s", took)
			}
			if err := ps.stopAll(); err != nil {
				t.Errorf("stopAll after stop: %v", err)
			}
		})
	}
}

func TestStopAll(t *testing.T) {
	ps := &procs{logDir: t.TempDir()}
	var started []*proc
	for i := range 3 {
		p, err := ps.start("sleeper-"+itoa(i), "", []string{"BENCH_TEST=1"}, "/bin/sh", "-c", "echo hello $BENCH_TEST; sleep 30")
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, p)
	}
	time.Sleep(100 * time.Millisecond)
	if err := ps.stopAll(); err != nil {
		t.Fatalf("stopAll: %v", err)
	}
	for _, p := range started {
		if !p.exited() {
			t.Errorf("%s (pid %d) still running", p.name, p.pid())
		}
		if got := p.logTail(); got != "hello 1" {
			t.Errorf("%s log %q, want the child's output with the given environment", p.name, got)
		}
	}
}

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
			var p *proc
			if tt.proc != "" {
				ps := &procs{logDir: t.TempDir()}
				var err error
				if p, err = ps.start("child", "", nil, "/bin/sh", "-c", tt.proc); err != nil {
					t.Fatal(err)
				}
				defer ps.stopAll()
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
			ps := &procs{logDir: t.TempDir()}
			p, err := ps.start("child", "", nil, "/bin/sh", "-c", tt.script)
			if err != nil {
				t.Fatal(err)
			}
			defer ps.stopAll()
			got := settle(context.Background(), []int{p.pid()}, tt.max)
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
