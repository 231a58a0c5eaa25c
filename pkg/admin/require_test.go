package admin

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestSetRequireToken: a config reload turning admin.require_token on
// closes a loopback listener's /admin/ and /debug/ to requests without an
// admin token at once, and turning it off opens them again.
func TestSetRequireToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(fullOptions(t))
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-done
	})
	base := "http://" + ln.Addr().String()
	steps := []struct {
		name    string
		require bool
		bearer  string
		path    string
		want    int
	}{
		{"open at start", false, "", "/admin/config", 200},
		{"required: no token", true, "", "/admin/config", 401},
		{"required: no token on pprof", true, "", "/debug/pprof/", 401},
		{"required: admin token", true, token(t, true), "/admin/config", 200},
		{"required: probes stay open", true, "", "/healthz", 200},
		{"open again", false, "", "/admin/config", 200},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			s.SetRequireToken(st.require)
			if r := do(t, "GET", base+st.path, st.bearer); r.status != st.want {
				t.Fatalf("status %d, want %d; body %s", r.status, st.want, r.body)
			}
		})
	}
}
