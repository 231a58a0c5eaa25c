package profiling

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func debugLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// refusingAddr returns a loopback address nothing listens on.
func refusingAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func noEnv(string) string { return "" }

func TestStartDisabled(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no address", Config{Getenv: noEnv}},
		{"no address, app name set", Config{ApplicationName: "tollgate.budget", Getenv: noEnv}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, buf := debugLogger()
			stop, err := Start(tt.cfg, log)
			if err != nil || stop == nil {
				t.Fatalf("Start = %v, %v; want a stop func and nil", stop != nil, err)
			}
			stop()
			stop()
			if !strings.Contains(buf.String(), "continuous profiling off") {
				t.Errorf("log does not say profiling is off: %s", buf.String())
			}
		})
	}
}

// TestStartUnreachable is the one timing check the issue asks for: Start
// must not wait for a server that refuses connections.
func TestStartUnreachable(t *testing.T) {
	addr := "http://" + refusingAddr(t)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"address in config", Config{ServerAddress: addr, Getenv: noEnv}},
		{"address from environment", Config{Getenv: func(k string) string {
			if k == EnvServerAddress {
				return addr
			}
			return ""
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, buf := debugLogger()
			tt.cfg.UploadRate = 100 * time.Millisecond
			tt.cfg.Instance = "test-1"
			t0 := time.Now()
			stop, err := Start(tt.cfg, log)
			took := time.Since(t0)
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Logf("Start took %v", took)
			if took > time.Second {
				t.Errorf("Start took %v with an unreachable server", took)
			}
			testkit.Wait(t, 10*time.Second, "a failed upload logged", func() bool {
				return strings.Contains(buf.String(), "connection refused")
			})
			t0 = time.Now()
			stop()
			t.Logf("stop took %v", time.Since(t0))
			stop()
			out := buf.String()
			if !strings.Contains(out, "continuous profiling on") || !strings.Contains(out, "instance=test-1") {
				t.Errorf("start not logged with its instance: %s", out)
			}
			if n := strings.Count(out, "connection refused"); n > 2 {
				// One kind of error per interval (1m): the first upload error
				// and, at most, one of a second format.
				t.Errorf("%d connection errors logged, want them rate limited:\n%s", n, out)
			}
		})
	}
}

func TestUploadsWithNameAndTags(t *testing.T) {
	var mu sync.Mutex
	var names []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		names = append(names, r.URL.Path+" "+r.URL.Query().Get("name"))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"defaults", Config{Instance: "pod-a"}, "tollgate.gateway"},
		{"budget service", Config{ApplicationName: "tollgate.budget", Instance: "pod-b", Tags: map[string]string{"region": "eu"}}, "tollgate.budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			names = nil
			mu.Unlock()
			tt.cfg.ServerAddress, tt.cfg.Getenv, tt.cfg.UploadRate = srv.URL, noEnv, 100*time.Millisecond
			stop, err := Start(tt.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			var got string
			testkit.Wait(t, 10*time.Second, "an upload", func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, n := range names {
					if strings.HasPrefix(n, "/ingest "+tt.want+"{") {
						got = n
						return true
					}
				}
				return false
			})
			svc := tt.want[strings.LastIndexByte(tt.want, '.')+1:]
			for _, tag := range []string{"service=" + svc, "instance=" + tt.cfg.Instance} {
				if !strings.Contains(got, tag) {
					t.Errorf("upload %q lacks tag %s", got, tag)
				}
			}
			for k, v := range tt.cfg.Tags {
				if !strings.Contains(got, k+"="+v) {
					t.Errorf("upload %q lacks tag %s=%s", got, k, v)
				}
			}
		})
	}
}

func TestLimitedLogger(t *testing.T) {
	type call struct {
		at     time.Duration // since the start
		format string
	}
	tests := []struct {
		name  string
		calls []call
		// want lists the logged details in order, with their suppressed counts.
		want []string
	}{
		{
			name:  "repeats within the interval are held back",
			calls: []call{{0, "upload profile: %v"}, {time.Second, "upload profile: %v"}, {59 * time.Second, "upload profile: %v"}},
			want:  []string{"upload profile: x"},
		},
		{
			name: "after the interval one is logged with the count held back",
			calls: []call{{0, "upload profile: %v"}, {time.Second, "upload profile: %v"}, {2 * time.Second, "upload profile: %v"},
				{time.Minute, "upload profile: %v"}},
			want: []string{"upload profile: x", "upload profile: x suppressed=2"},
		},
		{
			name:  "distinct kinds are limited separately",
			calls: []call{{0, "starting profiling session:"}, {0, "  AppName: %+v"}, {0, "upload profile: %v"}, {0, "  AppName: %+v"}},
			want:  []string{"starting profiling session:", "  AppName: x", "upload profile: x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			var got []string
			h := &recordHandler{level: slog.LevelDebug, f: func(r slog.Record) {
				var detail, sup string
				r.Attrs(func(a slog.Attr) bool {
					switch a.Key {
					case "detail":
						detail = a.Value.String()
					case "suppressed":
						sup = " suppressed=" + a.Value.String()
					}
					return true
				})
				if r.Level != slog.LevelDebug {
					t.Errorf("logged at %v, want debug", r.Level)
				}
				got = append(got, detail+sup)
			}}
			l := newLimitedLogger(slog.New(h), time.Minute, func() time.Time { return now })
			for _, c := range tt.calls {
				now = start.Add(c.at)
				if strings.Contains(c.format, "%") {
					l.Errorf(c.format, "x")
				} else {
					l.Infof(c.format)
				}
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("logged %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLimitedLoggerSkipsWhenDebugOff(t *testing.T) {
	var n int
	h := &recordHandler{level: slog.LevelInfo, f: func(slog.Record) { n++ }}
	l := newLimitedLogger(slog.New(h), time.Minute, time.Now)
	l.Errorf("upload profile: %v", "refused")
	if n != 0 {
		t.Errorf("%d records at info level, want none", n)
	}
}

// recordHandler passes each record at or above level to f.
type recordHandler struct {
	level slog.Level
	f     func(slog.Record)
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.f(r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }
