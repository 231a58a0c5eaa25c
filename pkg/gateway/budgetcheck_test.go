package gateway

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

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
