package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/console"
)

// TestRoleTable asks every page and every action as each role and checks
// the status: the console enforces pkg/access on the server, page by page
// and department by department. The expected statuses are written out,
// not derived from the table, so a change to the table shows here.
func TestRoleTable(t *testing.T) {
	users := map[string]console.User{
		access.Admin:     {Subject: "ada", Role: access.Admin},
		access.Finance:   {Subject: "fin", Role: access.Finance},
		access.DeptAdmin: {Subject: "dana", Role: access.DeptAdmin, Dept: "eng"},
		access.Viewer:    {Subject: "vic", Role: access.Viewer, Dept: "eng"},
	}
	const (
		ok   = http.StatusOK
		see  = http.StatusSeeOther
		deny = http.StatusForbidden
		// served: the access check let the request through to the read
		// page, whose own status depends on the data it is given (this
		// test gives none: 503 "not configured").
		served = -1
	)
	type want struct{ admin, finance, deptAdmin, viewer int }
	tests := []struct {
		name   string
		method string
		path   string // {eng} and {ops} stand for a fresh key of that department
		form   url.Values
		want   want
	}{
		{"overview", "GET", "/ui/", nil, want{served, served, served, served}},
		{"budgets", "GET", "/ui/budgets", nil, want{served, served, served, deny}},
		{"requests", "GET", "/ui/requests", nil, want{served, served, served, deny}},
		{"live totals", "GET", "/ui/events", nil, want{served, served, served, served}},
		{"request explain", "GET", "/ui/requests/req-1", nil, want{served, served, served, deny}},
		{"models", "GET", "/ui/models", nil, want{served, served, deny, deny}},
		{"keys", "GET", "/ui/keys", nil, want{ok, ok, ok, deny}},
		{"keys of own dept", "GET", "/ui/keys?dept=eng", nil, want{ok, ok, ok, deny}},
		{"keys of another dept", "GET", "/ui/keys?dept=ops", nil, want{ok, ok, deny, deny}},
		{"audit", "GET", "/ui/audit", nil, want{ok, deny, deny, deny}},
		{"create key in eng", "POST", "/ui/keys", url.Values{"sub": {"svc"}, "dept": {"eng"}}, want{ok, deny, ok, deny}},
		{"create key in ops", "POST", "/ui/keys", url.Values{"sub": {"svc"}, "dept": {"ops"}}, want{ok, deny, deny, deny}},
		{"rotate eng key", "POST", "/ui/keys/{eng}/rotate", nil, want{ok, deny, ok, deny}},
		{"rotate ops key", "POST", "/ui/keys/{ops}/rotate", nil, want{ok, deny, deny, deny}},
		{"revoke eng key", "POST", "/ui/keys/{eng}/revoke", nil, want{see, deny, see, deny}},
		{"revoke ops key", "POST", "/ui/keys/{ops}/revoke", nil, want{see, deny, deny, deny}},
		{"logout", "POST", "/ui/logout", nil, want{see, see, see, see}},
	}
	e := newEnv(t, envOpts{})
	for _, tt := range tests {
		for role, status := range map[string]int{access.Admin: tt.want.admin, access.Finance: tt.want.finance,
			access.DeptAdmin: tt.want.deptAdmin, access.Viewer: tt.want.viewer} {
			t.Run(tt.name+"/"+role, func(t *testing.T) {
				b := e.signedIn(users[role])
				path := tt.path
				for _, dept := range []string{"eng", "ops"} {
					path = replace(path, "{"+dept+"}", e.newKey(t, dept).ID)
				}
				var st int
				var body string
				if tt.method == "GET" {
					st, _, body = b.get(path)
				} else {
					form := url.Values{}
					for k, v := range tt.form {
						form[k] = v
					}
					st, _, body = b.post(path, form)
				}
				switch {
				case status == served:
					if st == deny || st == http.StatusUnauthorized || st/100 == 3 {
						t.Fatalf("%s %s as %s: %d, want the page served\n%s", tt.method, path, role, st, body)
					}
				case st != status:
					t.Fatalf("%s %s as %s: %d, want %d\n%s", tt.method, path, role, st, status, body)
				}
				if st == deny && !contains(body, "error-state") || st == deny && !contains(body, "not allowed") {
					t.Errorf("a refusal is the designed 403 page saying \"not allowed\":\n%s", body)
				}
			})
		}
	}
}

// TestRefusedChangeChangesNothing checks that a refused rotate leaves the
// key as it was and records nothing.
func TestRefusedChangeChangesNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	k := e.newKey(t, "ops")
	b := e.signedIn(console.User{Subject: "dana", Role: access.DeptAdmin, Dept: "eng"})
	if st, _, _ := b.post("/ui/keys/"+k.ID+"/revoke", nil); st != http.StatusForbidden {
		t.Fatalf("revoke of another department's key: %d, want 403", st)
	}
	list, err := e.keys.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].RevokedAt.IsZero() {
		t.Errorf("keys after a refused revoke: %+v", list)
	}
	events, err := audit.List(context.Background(), e.js, e.now().Add(-1))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if ev.Action == audit.ActionKeyRevoked {
			t.Errorf("a refused revoke was recorded: %+v", ev)
		}
	}
}

// newKey creates a key of dept in the store, as an operator would.
func (e *env) newKey(t *testing.T, dept string) apikey.Key {
	t.Helper()
	_, k, err := e.keys.Create(audit.WithActor(context.Background(), "setup"), apikey.Key{Subject: "svc-" + dept, Dept: dept})
	if err != nil {
		t.Fatal(err)
	}
	return k
}
