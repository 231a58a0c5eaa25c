package chtest_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/chtest"
)

var shared chtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// query runs q on the server's HTTP interface and returns the trimmed answer.
func query(t *testing.T, s *chtest.Server, q string) (string, error) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post("http://"+s.HTTPAddr()+"/?query="+url.QueryEscape(q), "text/plain", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(strings.TrimSpace(string(b)))
	}
	return strings.TrimSpace(string(b)), nil
}

func mustQuery(t *testing.T, s *chtest.Server, q string) string {
	t.Helper()
	out, err := query(t, s, q)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	return out
}

func TestShared(t *testing.T) {
	s := shared.Server(t)
	tests := []struct {
		name, query, want string
	}{
		{name: "select", query: "SELECT 1 + 1", want: "2"},
		{name: "system table", query: "SELECT count() FROM system.one", want: "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustQuery(t, s, tt.query); got != tt.want {
				t.Fatalf("%s = %q, want %q", tt.query, got, tt.want)
			}
		})
	}
	conn, err := net.DialTimeout("tcp", shared.Addr(t), time.Second)
	if err != nil {
		t.Fatalf("dial native port: %v", err)
	}
	conn.Close()
	if again := shared.Server(t); again != s {
		t.Fatal("Shared.Server started a second server")
	}
}

func TestStopStartKeepsData(t *testing.T) {
	s := chtest.New(t)
	mustQuery(t, s, "CREATE TABLE default.t (x UInt64) ENGINE = MergeTree() ORDER BY x")
	mustQuery(t, s, "INSERT INTO default.t SELECT number FROM system.numbers LIMIT 10")

	steps := []struct {
		name  string
		do    func() error
		up    bool
		count string
	}{
		{name: "stop", do: s.Stop, up: false},
		{name: "stop again", do: s.Stop, up: false},
		{name: "start", do: s.Start, up: true, count: "10"},
		{name: "start again", do: s.Start, up: true, count: "10"},
		{name: "restart", do: s.Restart, up: true, count: "10"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			got, err := query(t, s, "SELECT count() FROM default.t")
			switch {
			case !st.up && err == nil:
				t.Fatalf("server answers after %s: %q", st.name, got)
			case st.up && err != nil:
				t.Fatalf("server down after %s: %v", st.name, err)
			case st.up && got != st.count:
				t.Fatalf("count after %s = %s, want %s", st.name, got, st.count)
			}
		})
	}
}

func TestFail(t *testing.T) {
	tests := []struct {
		name     string
		ci       string
		err      error
		skipped  bool
		failedOK bool
	}{
		{name: "missing binary skips", ci: "", err: chtest.ErrNoBinary, skipped: true},
		{name: "missing binary fails on CI", ci: "true", err: chtest.ErrNoBinary, failedOK: true},
		{name: "other errors fail", ci: "", err: errors.New("boom"), failedOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			rec := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				chtest.Fail(rec, tt.err)
			}()
			<-done
			if rec.skipped != tt.skipped || rec.failed != tt.failedOK {
				t.Fatalf("skipped=%v failed=%v, want skipped=%v failed=%v", rec.skipped, rec.failed, tt.skipped, tt.failedOK)
			}
		})
	}
}

// recorder notes Skip and Fatal calls instead of ending the test.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(string, ...any) {
	r.skipped = true
	runtime.Goexit()
}

func (r *recorder) Fatalf(string, ...any) {
	r.failed = true
	runtime.Goexit()
}
