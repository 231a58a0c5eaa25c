package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestBudgetMigrate: flat team and project totals written before values
// were qualified are rebuilt by department from the stream and deleted; a
// flat total the stream cannot account for is kept; the dry run writes
// nothing; the budget consumer then adds only new events.
func TestBudgetMigrate(t *testing.T) {
	ns, js := startUsageStream(t)
	ctx := context.Background()
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	evs := []*usagev1.UsageEvent{
		{Dept: "research", Team: "ml", Project: "p1", CostNanoUsd: 1_000},
		{Dept: "finance", Team: "ml", Project: "p1", CostNanoUsd: 20_000},
		{Dept: "research", Team: "ml", CostNanoUsd: 300_000},
		{Dept: "research", Team: "web", CostNanoUsd: 4_000_000},
	}
	for i, e := range evs {
		e.EventId, e.Timestamp = fmt.Sprintf("e%d", i), at.Add(time.Duration(i)*time.Minute).UnixNano()
		publish(t, js, e, e.EventId)
	}
	last := uint64(len(evs))
	month := int32(2026*12 + 10)
	// The totals an earlier budget service wrote: team ml of both
	// departments in one; team gone has spend from events the stream no
	// longer holds (retention).
	flat := map[budget.TotalID]int64{
		{Scope: budget.ScopeTeam, Value: "ml", Period: budget.PeriodTotal}:               321_000,
		{Scope: budget.ScopeTeam, Value: "ml", Period: budget.PeriodMonth, Start: month}: 321_000,
		{Scope: budget.ScopeTeam, Value: "web", Period: budget.PeriodTotal}:              4_000_000,
		{Scope: budget.ScopeProject, Value: "p1", Period: budget.PeriodTotal}:            21_000,
		{Scope: budget.ScopeTeam, Value: "gone", Period: budget.PeriodTotal}:             5_000_000,
		{Scope: budget.ScopeDept, Value: "research", Period: budget.PeriodTotal}:         4_301_000,
		{Scope: budget.ScopeGlobal, Period: budget.PeriodTotal}:                          4_321_000,
	}
	reqs := map[string]uint64{"ml": 3, "web": 1, "p1": 2, "gone": 2, "research": 3, "": 4}
	for id, cost := range flat {
		b, _ := proto.Marshal(&usagev1.SpendTotal{Scope: id.Scope.String(), Value: id.Value, Period: id.Period.String(),
			PeriodStart: id.PeriodStart(), CostNanoUsd: cost, Requests: reqs[id.Value], AsOfSeq: last})
		if _, err := kv.Create(ctx, id.Key(), b); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := run1(t, nil, "budget", "migrate", "--nats", ns.ClientURL())
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"write  team research/ml total  0.000301 USD (new)",
		"write  team finance/ml month 2026-11  0.00002 USD (new)",
		"write  project research/p1 total  0.000001 USD (new)",
		"delete team ml total  0.000321 USD, now in finance/ml 0.00002, research/ml 0.000301",
		"delete project p1 total  0.000021 USD, now in finance/p1 0.00002, research/p1 0.000001",
		"keep   team gone total  0.005 USD, of which 0.005 USD are not in the stream (department unknown)",
		"(as of stream seq 4), 4 flat totals to delete, 1 kept (0.005 USD not in the stream)",
		"dry run: nothing written",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if got := total(t, kv, budget.TotalID{Scope: budget.ScopeTeam, Value: "research/ml", Period: budget.PeriodTotal}); got != nil {
		t.Fatalf("dry run wrote %v", got)
	}
	if got := total(t, kv, budget.TotalID{Scope: budget.ScopeTeam, Value: "ml", Period: budget.PeriodTotal}); got == nil {
		t.Fatal("dry run deleted a flat total")
	}

	code, out, errOut = run1(t, nil, "budget", "migrate", "--nats", ns.ClientURL(), "--apply")
	if code != 0 || !strings.Contains(out, "migrated: 15 qualified totals written, 4 flat totals deleted") {
		t.Fatalf("apply: exit %d: %s\n%s", code, out, errOut)
	}
	want := map[budget.TotalID]int64{
		{Scope: budget.ScopeTeam, Value: "research/ml", Period: budget.PeriodTotal}:               301_000,
		{Scope: budget.ScopeTeam, Value: "finance/ml", Period: budget.PeriodTotal}:                20_000,
		{Scope: budget.ScopeTeam, Value: "research/ml", Period: budget.PeriodMonth, Start: month}: 301_000,
		{Scope: budget.ScopeTeam, Value: "research/web", Period: budget.PeriodTotal}:              4_000_000,
		{Scope: budget.ScopeProject, Value: "research/p1", Period: budget.PeriodTotal}:            1_000,
		{Scope: budget.ScopeProject, Value: "finance/p1", Period: budget.PeriodTotal}:             20_000,
		{Scope: budget.ScopeTeam, Value: "gone", Period: budget.PeriodTotal}:                      5_000_000, // kept
		{Scope: budget.ScopeDept, Value: "research", Period: budget.PeriodTotal}:                  4_301_000, // untouched
	}
	for id, cost := range want {
		got := total(t, kv, id)
		if got == nil || got.CostNanoUsd != cost {
			t.Errorf("%s = %v, want %d nano-USD", id.Key(), got, cost)
		}
	}
	for _, v := range []string{"ml", "web"} {
		if got := total(t, kv, budget.TotalID{Scope: budget.ScopeTeam, Value: v, Period: budget.PeriodTotal}); got != nil {
			t.Errorf("flat team %s still there: %v", v, got)
		}
	}

	// budget show names teams by department and filters by the limit syntax.
	for filter, wantVals := range map[string]string{"research/ml": "research/ml", "*/ml": "finance/ml research/ml", "*": "finance/ml gone research/ml research/web"} {
		code, out, errOut := run1(t, nil, "budget", "show", "--nats", ns.ClientURL(), "--team", filter, "--period", "total", "--json")
		var rows []budgetRow
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
			t.Fatalf("budget show --team %s: exit %d: %s %s", filter, code, out, errOut)
		}
		var vals []string
		for _, r := range rows {
			vals = append(vals, r.Value)
		}
		if strings.Join(vals, " ") != wantVals {
			t.Errorf("budget show --team %s = %v, want %s", filter, vals, wantVals)
		}
	}

	// The budget service resumes: old events are not counted again, a new one is.
	c, err := budget.NewConsumer(js, budget.ConsumerOptions{Durable: "budget-after-migrate",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}()
	publish(t, js, &usagev1.UsageEvent{EventId: "e-new", Dept: "research", Team: "ml", CostNanoUsd: 7, Timestamp: at.UnixNano()}, "e-new")
	id := budget.TotalID{Scope: budget.ScopeTeam, Value: "research/ml", Period: budget.PeriodTotal}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := total(t, kv, id)
		if got != nil && got.AsOfSeq > last {
			if got.CostNanoUsd != 301_007 || got.Requests != 3 {
				t.Fatalf("after the migration the consumer made %v, want 301007 nano-USD over 3 requests", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new event not applied: %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func total(t *testing.T, kv jetstream.KeyValue, id budget.TotalID) *usagev1.SpendTotal {
	t.Helper()
	e, err := kv.Get(context.Background(), id.Key())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var st usagev1.SpendTotal
	if err := proto.Unmarshal(e.Value(), &st); err != nil {
		t.Fatal(err)
	}
	return &st
}
