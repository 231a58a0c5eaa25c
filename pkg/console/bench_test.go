package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/console"
)

// BenchmarkKeysPage serves GET /ui/keys with 50 keys to a signed-in
// dept-admin: the session read from the KV bucket of an embedded NATS
// server, the access checks, the key list and the page. It is the server
// time of a console page that reads no ClickHouse.
func BenchmarkKeysPage(b *testing.B) {
	e := newEnv(b, envOpts{})
	for i := range 50 {
		dept := "eng"
		if i%2 == 1 {
			dept = "ops"
		}
		if _, _, err := e.keys.Create(audit.WithActor(context.Background(), "setup"), apikey.Key{Subject: "svc", Dept: dept}); err != nil {
			b.Fatal(err)
		}
	}
	id, _, err := e.c.NewSessionForTest(context.Background(), console.User{Subject: "dana", Role: access.DeptAdmin, Dept: "eng"})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/ui/keys", nil)
	req.AddCookie(&http.Cookie{Name: console.SessionCookie, Value: id})
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		e.c.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}
