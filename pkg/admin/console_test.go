package admin

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestConsoleMount serves a console handler under /ui/: it gets its own
// requests (form bodies included: it checks CSRF tokens itself), never the
// admin token's role, and only after the listener's Host and cross-origin
// checks, which refuse before it is called. Without a console /ui/ is 404.
func TestConsoleMount(t *testing.T) {
	var calls atomic.Int32
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte("console " + r.Method + " " + r.URL.Path))
	})
	o := fullOptions(t)
	o.RequireToken = true // the console does its own sign-in: no admin token needed
	o.Console = ui
	base := start(t, o)
	tests := []struct {
		name, method, path string
		hdr                map[string]string
		host               string
		want               int
		reaches            bool
	}{
		{"page", "GET", "/ui/keys", nil, "", http.StatusOK, true},
		{"form post", "POST", "/ui/keys", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": base}, "", http.StatusOK, true},
		{"bare /ui", "GET", "/ui", nil, "", http.StatusMovedPermanently, false},
		{"foreign host", "GET", "/ui/keys", nil, "rebind.example", http.StatusForbidden, false},
		{"cross-origin post", "POST", "/ui/keys", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"}, "", http.StatusForbidden, false},
		{"cross-site fetch", "POST", "/ui/logout", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", http.StatusForbidden, false},
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := calls.Load()
			req, err := http.NewRequest(tt.method, base+tt.path, strings.NewReader("a=b"))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
			if reached := calls.Load() > before; reached != tt.reaches {
				t.Errorf("console reached: %v, want %v", reached, tt.reaches)
			}
		})
	}
	o.Console = nil
	if r := do(t, "GET", start(t, o)+"/ui/keys", ""); r.status != http.StatusNotFound {
		t.Errorf("without a console /ui/keys is %d, want 404", r.status)
	}
}
