package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/console"
)

func TestSignedOutGoesToLogin(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.browser()
	st, h, _ := b.get("/ui/keys")
	if st != http.StatusSeeOther || h.Get("Location") != "/ui/login" {
		t.Fatalf("GET /ui/keys signed out: %d %q, want 303 to /ui/login", st, h.Get("Location"))
	}
	st, _, body := b.get("/ui/login")
	if st != http.StatusOK || !strings.Contains(body, "empty-state") {
		t.Fatalf("login page: %d\n%s", st, body)
	}
}

func TestLayoutShowsUserAndNav(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.signedIn(console.User{Subject: "dana", Role: access.DeptAdmin, Dept: "eng"})
	st, _, body := b.get("/ui/keys")
	if st != http.StatusOK {
		t.Fatalf("GET /ui/keys: %d\n%s", st, body)
	}
	for _, want := range []string{`id="user"`, "dana", `id="logout"`, `href="/ui/keys"`, `href="/ui/budgets"`, `id="key-create-form"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, not := range []string{`href="/ui/audit"`, `href="/ui/models"`} {
		if strings.Contains(body, not) {
			t.Errorf("a dept-admin's nav shows %s", not)
		}
	}
}
