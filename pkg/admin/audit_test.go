package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/revoke"
)

func post(t *testing.T, url, bearer, body string) response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func TestRevokeAudited(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := revoke.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	rv := revoke.NewRevoker(kv, audit.NewRecorder(js, audit.Options{}), nil)
	for _, require := range []bool{true, false} {
		o := fullOptions(t)
		o.RequireToken = require
		o.Revoke = func(ctx context.Context, kind, value, reason string) error {
			return rv.Revoke(ctx, audit.Actor(ctx), revoke.Kind(kind), value, reason)
		}
		o.Unrevoke = func(ctx context.Context, kind, value string) error {
			return rv.Unrevoke(ctx, audit.Actor(ctx), revoke.Kind(kind), value)
		}
		base := start(t, o)
		tests := []struct {
			name, path, bearer, body string
			want                     int
		}{
			{"revoke with an admin token", "/admin/revoke", token(t, true), `{"jti":"key-9","reason":"leaked"}`, 200},
			{"unrevoke", "/admin/unrevoke", token(t, true), `{"jti":"key-9"}`, 200},
			{"both kinds", "/admin/revoke", token(t, true), `{"jti":"a","sub":"b"}`, 400},
			{"unknown field", "/admin/revoke", token(t, true), `{"kid":"a"}`, 400},
		}
		if !require {
			tests = append(tests, struct {
				name, path, bearer, body string
				want                     int
			}{"loopback without a token", "/admin/revoke", "", `{"sub":"mallory"}`, 200})
		}
		for _, tt := range tests {
			if r := post(t, base+tt.path, tt.bearer, tt.body); r.status != tt.want {
				t.Errorf("require=%v %s: status %d body %s, want %d", require, tt.name, r.status, r.body, tt.want)
			}
		}
		if require {
			if r := post(t, base+"/admin/revoke", token(t, false), `{"jti":"x"}`); r.status != 403 {
				t.Errorf("non-admin token: status %d", r.status)
			}
		}
	}
	events, err := audit.List(ctx, js, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ actor, action, target string }{
		{"ops", audit.ActionTokenRevoked, "jti:key-9"},
		{"ops", audit.ActionTokenUnrevoked, "jti:key-9"},
		{"ops", audit.ActionTokenRevoked, "jti:key-9"},
		{"ops", audit.ActionTokenUnrevoked, "jti:key-9"},
		{"loopback", audit.ActionTokenRevoked, "sub:mallory"},
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for i, w := range want {
		if e := events[i]; e.Actor != w.actor || e.Action != w.action || e.Target != w.target {
			t.Errorf("event %d: %s %s %s, want %+v", i, e.Actor, e.Action, e.Target, w)
		}
	}
}

func TestReloadNotAudited(t *testing.T) {
	o := fullOptions(t)
	o.Reload = func(ctx context.Context) (any, error) {
		if audit.Actor(ctx) != "ops" {
			t.Errorf("reload actor %q, want the token's subject", audit.Actor(ctx))
		}
		return "ok", audit.ErrNotRecorded
	}
	r := post(t, start(t, o)+"/admin/reload", token(t, true), "")
	if r.status != 200 || !strings.Contains(r.body, `"audit_error"`) {
		t.Errorf("status %d body %s, want 200 with audit_error", r.status, r.body)
	}
}

func TestDiff(t *testing.T) {
	base := func() *config.Config {
		c := testConfig(t)
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "eng", AmountUSD: "5", Period: "month"}}
		c.NATS.URL = "nats://tollgate:pw-one@nats:4222"
		return c
	}
	tests := []struct {
		name   string
		change func(c *config.Config)
		want   []string
	}{
		{"same", func(*config.Config) {}, nil},
		{"budget amount", func(c *config.Config) { c.Budgets[0].AmountUSD = "10" }, []string{`budgets[0].amount_usd: "5" -> "10"`}},
		{"budget added", func(c *config.Config) {
			c.Budgets = append(c.Budgets, config.BudgetLimit{Scope: "team", Value: "research/ml", AmountUSD: "1", Period: "day"})
		}, nil},
		{"url password", func(c *config.Config) { c.NATS.URL = "nats://tollgate:pw-two@nats:4222" }, []string{"nats.url: changed"}},
		{"api key", func(c *config.Config) { c.Providers[0].APIKey = "sk-other-0000" }, []string{"providers[0].api_key: changed"}},
		{"header value", func(c *config.Config) { c.Providers[1].Headers["X-Team-Route"] = "pw-header" },
			[]string{"providers[1].headers.X-Team-Route: changed"}},
		{"header added", func(c *config.Config) { c.Providers[1].Headers["Cookie"] = "pw-cookie" },
			[]string{"providers[1].headers.Cookie: changed"}},
		{"headers of a new provider", func(c *config.Config) {
			c.Providers = append(c.Providers, config.Provider{Name: "p3", Kind: "openai", Headers: map[string]string{"X-Any": "pw-new"}})
		}, nil},
		{"base_url query", func(c *config.Config) { c.Providers[1].BaseURL = "https://proxy.example/v1?api-key=pw-q&sig=pw-s" },
			[]string{"providers[1].base_url: changed"}},
		{"nats token", func(c *config.Config) { c.NATS.URL = "nats://pw-token@nats:4222" },
			[]string{`nats.url: "nats://tollgate:xxxxx@nats:4222" -> "nats://[redacted]@nats:4222"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := base(), base()
			tt.change(b)
			cs, err := Diff(a, b)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cs {
				got = append(got, c.String())
				if c.Secret && ((c.Before != nil && c.Before != Redacted) || (c.After != nil && c.After != Redacted)) {
					t.Errorf("secret change shows values: %+v", c)
				}
			}
			if tt.want != nil && strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("changes %q, want %q", got, tt.want)
			}
			if tt.name == "same" && len(got) != 0 {
				t.Errorf("changes %q, want none", got)
			}
			if tt.name == "budget added" && (len(got) != 1 || !strings.HasPrefix(got[0], "budgets: [")) {
				t.Errorf("changes %q, want the whole budgets list", got)
			}
			if all := strings.Join(got, " "); strings.Contains(all, "pw-") || strings.Contains(all, providerKey) {
				t.Errorf("changes show a secret: %q", got)
			}
			if all, _ := json.Marshal(cs); strings.Contains(string(all), "pw-") || strings.Contains(string(all), headerBearer) {
				t.Errorf("change values show a secret: %s", all)
			}
		})
	}
}
