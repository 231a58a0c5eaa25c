package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestReconcileByScope: with the budget service behind by one event,
// `reconcile --by-scope` shows that event's cost as unapplied in every scope
// it counts towards, and nothing in the others.
func TestReconcileByScope(t *testing.T) {
	ns, js := startUsageStream(t)
	ctx := context.Background()
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	publish(t, js, &usagev1.UsageEvent{EventId: "a", Timestamp: now, Dept: "research", Team: "ml", KeyId: "k1", CostNanoUsd: 1000}, "a")
	publish(t, js, &usagev1.UsageEvent{EventId: "b", Timestamp: now, Dept: "finance", Team: "ml", KeyId: "k2", CostNanoUsd: 30}, "b")
	// Applied so far: event a only.
	for _, id := range []budget.TotalID{
		{Scope: budget.ScopeGlobal, Period: budget.PeriodTotal},
		{Scope: budget.ScopeDept, Value: "research", Period: budget.PeriodTotal},
		{Scope: budget.ScopeTeam, Value: "research/ml", Period: budget.PeriodTotal},
		{Scope: budget.ScopeKey, Value: "k1", Period: budget.PeriodTotal},
		{Scope: budget.ScopeKey, Value: "k1", Period: budget.PeriodDay, Start: budget.PeriodStarts(now)[budget.PeriodDay]}, // not all-time: not summed
	} {
		b, _ := proto.Marshal(&usagev1.SpendTotal{Scope: id.Scope.String(), Value: id.Value, Period: id.Period.String(), CostNanoUsd: 1000, Requests: 1, AsOfSeq: 1})
		if _, err := kv.Put(ctx, id.Key(), b); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run1(t, nil, "reconcile", "--nats", ns.ClientURL(), "--by-scope", "--json")
	var rep struct {
		OK      bool         `json:"ok"`
		ByScope []scopeDrift `json:"by_scope"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &rep) != nil || rep.OK {
		t.Fatalf("exit %d (want 1: the budgets lag): %s%s", code, out, errOut)
	}
	want := map[string][3]int64{
		"global": {1030, 1000, 30}, "dept": {1030, 1000, 30}, "team": {1030, 1000, 30},
		"project": {0, 0, 0}, "subject": {0, 0, 0}, "key": {1030, 1000, 30},
	}
	if len(rep.ByScope) != len(want) {
		t.Fatalf("by_scope %+v", rep.ByScope)
	}
	for _, d := range rep.ByScope {
		if w := want[d.Scope]; [3]int64{d.StreamNano, d.AppliedNano, d.UnappliedNano} != w {
			t.Errorf("%s: stream %d applied %d unapplied %d, want %v", d.Scope, d.StreamNano, d.AppliedNano, d.UnappliedNano, w)
		}
	}
	code, out, _ = run1(t, nil, "reconcile", "--nats", ns.ClientURL(), "--by-scope")
	if code != 1 || !strings.Contains(out, "UNAPPLIED USD") || !strings.Contains(out, "0.00000003") {
		t.Fatalf("table: exit %d:\n%s", code, out)
	}
	if code, _, errOut := run1(t, nil, "reconcile", "--nats", ns.ClientURL(), "--by-scope", "--since", "1h"); code != 2 || !strings.Contains(errOut, "--by-scope") {
		t.Fatalf("--by-scope with --since: exit %d: %s", code, errOut)
	}
}
