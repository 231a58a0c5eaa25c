package gateway

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestUsageEventRecordsBudgets: the usage event lists every limit checked
// at admission with the spend seen then (the applied total, without the
// request's own reservation) and the headroom; a refused request lists the
// limit that refused it.
func TestUsageEventRecordsBudgets(t *testing.T) {
	const spentNano = 212_300_000_000 // $212.30 already applied to dept research this month
	tests := []struct {
		name   string
		limit  string // dept research month, USD
		status int
		want   []*usagev1.BudgetCheck // reserved is checked apart
	}{
		{
			name: "admitted", limit: "500", status: 200,
			want: []*usagev1.BudgetCheck{
				{Scope: "dept", Value: "research", Period: "month", LimitNanoUsd: 500_000_000_000, SpentNanoUsd: spentNano, HeadroomNanoUsd: 287_700_000_000},
				{Scope: "team", Value: "research/nlp", Period: "day", LimitNanoUsd: 10_000_000_000, HeadroomNanoUsd: 10_000_000_000},
			},
		},
		{
			name: "refused", limit: "212.30", status: 429,
			want: []*usagev1.BudgetCheck{
				{Scope: "dept", Value: "research", Period: "month", LimitNanoUsd: spentNano, SpentNanoUsd: spentNano, HeadroomNanoUsd: 0},
				{Scope: "team", Value: "research/nlp", Period: "day", LimitNanoUsd: 10_000_000_000, HeadroomNanoUsd: 10_000_000_000},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAcctRig(t, func(c *config.Config) {
				c.Budgets = []config.BudgetLimit{
					{Scope: "dept", Value: "research", AmountUSD: tt.limit, Period: "month"},
					{Scope: "team", Value: "*", AmountUSD: "10", Period: "day"},
				}
			})
			now := time.Now().UTC()
			seedSpend(t, a, budget.ScopeDept, "research", budget.PeriodMonth, spentNano)
			resp := a.post("/v1/chat/completions", a.token(nil), chatBody, "X-Request-Id", "budgeted-1")
			if body := readBody(t, resp); resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			ev := a.events(t, 1)[0]
			if len(ev.Budgets) != len(tt.want) {
				t.Fatalf("budgets %v, want %d entries", ev.Budgets, len(tt.want))
			}
			for i, want := range tt.want {
				got := proto.Clone(ev.Budgets[i]).(*usagev1.BudgetCheck)
				if got.ReservedNanoUsd <= 0 {
					t.Errorf("budget %d reserved %d, want the request's estimate", i, got.ReservedNanoUsd)
				}
				got.ReservedNanoUsd = 0
				want.PeriodStart = now.Format("2006-01")
				if want.Period == "day" {
					want.PeriodStart = now.Format(time.DateOnly)
				}
				if !proto.Equal(got, want) {
					t.Errorf("budget %d = %v, want %v", i, got, want)
				}
			}
		})
	}
}

// seedSpend writes a spend total to the KV bucket as the budget service
// would, and waits until the gateway's tracker sees it.
func seedSpend(t *testing.T, a *acctRig, sc budget.Scope, value string, p budget.Period, nano int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := budget.EnsureBucket(ctx, a.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := budget.TotalID{Scope: sc, Value: value, Period: p}
	key := sc.String() + "." + value + "." + p.String() + "." + a.tracker.PeriodStart(p)
	if _, err := budget.ParseKey(key); err != nil {
		t.Fatal(err)
	}
	data, err := proto.Marshal(&usagev1.SpendTotal{Scope: sc.String(), Value: value, Period: p.String(),
		PeriodStart: a.tracker.PeriodStart(p), CostNanoUsd: nano})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	for a.tracker.Used(sc, value, p) != nano {
		if ctx.Err() != nil {
			t.Fatalf("tracker never saw %v: %v", id, ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTokenBudgetClaims: limits signed into a token's budgets claim hold
// on every request of that token, not only the first (the gateway derives
// them once per verified token and keeps them with the cached principal):
// a limit with no room refuses each request with 429, a generous one
// admits each and the usage event records it as the token's, and a
// malformed claim refuses each request with 401.
func TestTokenBudgetClaims(t *testing.T) {
	a := newAcctRig(t, nil)
	claim := func(bs ...auth.BudgetClaim) string {
		return a.token(func(o *auth.MintOptions) { o.Budgets = bs })
	}
	tight := claim(auth.BudgetClaim{Scope: "subject", AmountUSD: 0.000000001, Period: "day"})
	roomy := claim(auth.BudgetClaim{Scope: "team", Value: "nlp", AmountUSD: 100, Period: "day"})
	broken := claim(auth.BudgetClaim{Scope: "team", Value: "research/", AmountUSD: 1, Period: "day"})
	for i := range 3 {
		resp := a.post("/v1/chat/completions", tight, chatBody)
		msg := errorShape(t, readBody(t, resp), typeBudget, "budget_exceeded")
		if resp.StatusCode != 429 || !strings.Contains(msg, `subject "alice" day limit`) {
			t.Fatalf("request %d with a tight token limit: status %d: %s", i, resp.StatusCode, msg)
		}
		resp = a.post("/v1/chat/completions", broken, chatBody)
		msg = errorShape(t, readBody(t, resp), typeAuthentication, "invalid_token")
		if resp.StatusCode != 401 || !strings.Contains(msg, "budgets claim [0]") {
			t.Fatalf("request %d with a malformed budgets claim: status %d: %s", i, resp.StatusCode, msg)
		}
		if resp = a.post("/v1/chat/completions", roomy, chatBody); resp.StatusCode != 200 {
			t.Fatalf("request %d with a roomy token limit: status %d: %s", i, resp.StatusCode, readBody(t, resp))
		}
		readBody(t, resp)
	}
	// Every request's event, refused ones included: the 401s are refused
	// before any limit is checked, so their events record none.
	byStatus := map[uint32]int{}
	for _, ev := range a.events(t, 9) {
		byStatus[ev.StatusCode]++
		if ev.StatusCode == 401 && len(ev.Budgets) != 0 {
			t.Errorf("event of a malformed budgets claim records budgets %v", ev.Budgets)
		}
		if ev.StatusCode != 401 && len(ev.Budgets) != 1 {
			t.Errorf("event status %d records budgets %v, want the token's one limit", ev.StatusCode, ev.Budgets)
		}
		for _, b := range ev.Budgets {
			if !b.FromToken {
				t.Errorf("budget %v of a request with no configured limit is not the token's", b)
			}
			switch {
			case ev.StatusCode == 200 && b.Scope == "team" && b.Value == "research/nlp" && b.LimitNanoUsd == 100_000_000_000:
			case ev.StatusCode == 429 && b.Scope == "subject" && b.Value == "alice" && b.LimitNanoUsd == 1:
			default:
				t.Errorf("event status %d: unexpected budget %v", ev.StatusCode, b)
			}
		}
	}
	if want := map[uint32]int{200: 3, 401: 3, 429: 3}; !maps.Equal(byStatus, want) {
		t.Errorf("events by status %v, want %v", byStatus, want)
	}
}

// TestBudgetChecksReusePooledMessages: a usage event from the message pool
// brings the budget-check messages of an earlier request; the checks are
// written over them, nothing of the earlier request stays, and a request
// that checked no limit records none.
func TestBudgetChecksReusePooledMessages(t *testing.T) {
	old := []*usagev1.BudgetCheck{
		{Scope: "team", Value: "research/ml", Period: "day", PeriodStart: "2026-12-04", FromToken: true, LimitNanoUsd: 9, SpentNanoUsd: 8, ReservedNanoUsd: 7, HeadroomNanoUsd: 1},
		{Scope: "key", Value: "k1", Period: "total", LimitNanoUsd: 5},
		{Scope: "global", Period: "month", PeriodStart: "2026-12", LimitNanoUsd: 3},
	}
	bc := budgetChecks{n: 1, reserved: 40}
	bc.a[0] = budget.Checked{Scope: budget.ScopeDept, Value: "research", Period: budget.PeriodMonth, PeriodStart: "2026-12", LimitNano: 100, SpentNano: 60}
	want := []*usagev1.BudgetCheck{{Scope: "dept", Value: "research", Period: "month", PeriodStart: "2026-12", LimitNanoUsd: 100, SpentNanoUsd: 60, ReservedNanoUsd: 40, HeadroomNanoUsd: 40}}

	reused := old[:0]
	got := bc.appendEvent(reused)
	if len(got) != 1 || !proto.Equal(got[0], want[0]) {
		t.Fatalf("over an earlier event's checks: %v, want %v", got, want)
	}
	if got[0] != old[0] {
		t.Error("the pooled message was not reused")
	}
	if got := bc.appendEvent(nil); len(got) != 1 || !proto.Equal(got[0], want[0]) {
		t.Fatalf("into a new event: %v, want %v", got, want)
	}
	if got := (&budgetChecks{}).appendEvent(old[:0]); got != nil {
		t.Fatalf("no limit checked: %v, want none", got)
	}
}
