package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// TestNoDeptTokenUnderDeptLimits: a token that names no department is
// accounted under auth.NoDept, so a dept "*" limit holds for it: its usage
// event carries that dept, the budget service keeps its dept total, and
// once that total is at the limit all 10 further requests get 429 naming
// the dept (issue 41, finding 8: 10 of 10 were served).
func TestNoDeptTokenUnderDeptLimits(t *testing.T) {
	const limitUSD = 1000
	a := newAcctRig(t, func(c *config.Config) {
		c.Budgets = []config.BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "1000", Period: "month"}}
	})
	tok := a.token(func(o *auth.MintOptions) { o.Dept = "" })
	resp := a.post("/v1/chat/completions", tok, chatBody)
	if body := readBody(t, resp); resp.StatusCode != 200 {
		t.Fatalf("first request: status %d: %s", resp.StatusCode, body)
	}
	ev := a.events(t, 1)[0]
	if ev.Dept != auth.NoDept {
		t.Fatalf("usage event dept %q, want %q", ev.Dept, auth.NoDept)
	}
	if len(ev.Budgets) != 1 || ev.Budgets[0].Scope != "dept" || ev.Budgets[0].Value != auth.NoDept {
		t.Fatalf("budgets checked %v, want the dept * limit on %q", ev.Budgets, auth.NoDept)
	}
	// Another request of the dept brings its month to the limit, through
	// the budget service as any spend would.
	spent := &usagev1.UsageEvent{EventId: "0193a5c0-0000-7000-8000-000000000041", RequestId: "elsewhere",
		Timestamp: time.Now().UnixNano(), Subject: "bob", Dept: auth.NoDept, CostNanoUsd: limitUSD * 1_000_000_000}
	if err := a.pub.Enqueue(spent); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 10*time.Second, "the dept total at the limit", func() bool {
		return a.tracker.Used(budget.ScopeDept, auth.NoDept, budget.PeriodMonth) >= limitUSD*1_000_000_000
	})
	for i := range 10 {
		resp := a.post("/v1/chat/completions", tok, chatBody)
		msg := errorShape(t, readBody(t, resp), typeBudget, "budget_exceeded")
		if resp.StatusCode != 429 || !strings.Contains(msg, `dept "`+auth.NoDept+`"`) {
			t.Fatalf("request %d over the dept limit: status %d: %s", i+1, resp.StatusCode, msg)
		}
	}
}

// TestNewTokenSameSubjectLimits: the limits signed into a JWT belong to
// its subject, not to the token's id, so minting more tokens for the
// subject gets no fresh allowance (issue 41, finding 13): rpm 2 across
// three tokens admits 2 requests; a key-scope budget claim counts the
// subject's spend, so a new token is refused once the subject is at it.
func TestNewTokenSameSubjectLimits(t *testing.T) {
	a := newAcctRig(t, nil)
	t.Run("rpm", func(t *testing.T) {
		var admitted int
		for i := range 3 {
			tok := a.token(func(o *auth.MintOptions) { o.Subject = "mallory"; o.RPM = 2 })
			for range 2 {
				resp := a.post("/v1/chat/completions", tok, chatBody)
				body := readBody(t, resp)
				switch resp.StatusCode {
				case 200:
					admitted++
				case 429:
					if msg := errorShape(t, body, typeRateLimit, "rate_limit_exceeded"); !strings.Contains(msg, "rpm 2") {
						t.Errorf("token %d: refusal %q does not name the limit", i, msg)
					}
				default:
					t.Fatalf("token %d: status %d: %s", i, resp.StatusCode, body)
				}
			}
		}
		if admitted != 2 {
			t.Errorf("%d requests admitted over three tokens of one subject with rpm 2, want 2", admitted)
		}
		// Another subject has its own allowance.
		other := a.token(func(o *auth.MintOptions) { o.Subject = "trent"; o.RPM = 2 })
		if resp := a.post("/v1/chat/completions", other, chatBody); resp.StatusCode != 200 {
			t.Errorf("another subject's first request: status %d: %s", resp.StatusCode, readBody(t, resp))
		}
	})
	t.Run("key budget claim", func(t *testing.T) {
		const limitNano = 1_000_000_000 // $1 a day
		claim := []auth.BudgetClaim{{Scope: "key", AmountUSD: 1, Period: "day"}}
		seedSpend(t, a, budget.ScopeSubject, "victor", budget.PeriodDay, limitNano)
		for i := range 3 {
			tok := a.token(func(o *auth.MintOptions) { o.Subject = "victor"; o.Budgets = claim })
			resp := a.post("/v1/chat/completions", tok, chatBody)
			msg := errorShape(t, readBody(t, resp), typeBudget, "budget_exceeded")
			if resp.StatusCode != 429 || !strings.Contains(msg, `subject "victor" day limit`) {
				t.Fatalf("new token %d of a subject at its key budget: status %d: %s", i, resp.StatusCode, msg)
			}
		}
	})
}

// TestRequestIDLookupPerTenant: two tenants send the same x-request-id;
// each request gets the gateway's own id, which keys its usage event, so
// each tenant's lookup (GET /admin/usage/{request_id}, tollctl explain)
// finds its own request, and the client's value finds none (issue 41,
// finding 14: the lookup returned the first tenant's request to both).
func TestRequestIDLookupPerTenant(t *testing.T) {
	a := newAcctRig(t, nil)
	tenants := []struct{ sub, dept string }{{"alice", "research"}, {"bob", "finance"}}
	ids := make([]string, len(tenants))
	for i, tn := range tenants {
		tok := a.token(func(o *auth.MintOptions) { o.Subject, o.Dept = tn.sub, tn.dept })
		resp := a.post("/v1/chat/completions", tok, chatBody, "X-Request-Id", "same-id")
		if body := readBody(t, resp); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", tn.sub, resp.StatusCode, body)
		}
		ids[i] = resp.Header.Get("X-Request-Id")
		if got := resp.Header.Get("X-Client-Request-Id"); got != "same-id" {
			t.Errorf("%s: x-client-request-id %q, want the client's own", tn.sub, got)
		}
	}
	if ids[0] == ids[1] || ids[0] == "same-id" {
		t.Fatalf("request ids %q: want the gateway's own, one per request", ids)
	}
	a.events(t, 2)
	since := time.Now().Add(-time.Hour)
	for i, tn := range tenants {
		ch, err := billing.FromStream(context.Background(), a.js, usage.StreamName, ids[i], since)
		if err != nil {
			t.Fatalf("%s: lookup %s: %v", tn.sub, ids[i], err)
		}
		if ch.Subject != tn.sub || ch.Dept != tn.dept || ch.RequestID != ids[i] {
			t.Errorf("lookup of %s's request %s found subject %q dept %q request %q", tn.sub, ids[i], ch.Subject, ch.Dept, ch.RequestID)
		}
	}
	if _, err := billing.FromStream(context.Background(), a.js, usage.StreamName, "same-id", since); !errors.Is(err, billing.ErrNotFound) {
		t.Errorf("lookup by the client's x-request-id: err %v, want not found", err)
	}
}
