package main

import (
	"testing"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestStreamScanAdd counts events as a consumer applies them: a batch
// whose producer and seq came before is a republish, not a duplicate; one
// event id applied twice is a duplicate.
func TestStreamScanAdd(t *testing.T) {
	ev := func(req, dept string, cost int64) *usagev1.UsageEvent {
		return &usagev1.UsageEvent{EventId: "ev-" + req, RequestId: req, Dept: dept, CostNanoUsd: cost}
	}
	batch := func(p string, seq uint64, evs ...*usagev1.UsageEvent) *usagev1.UsageBatch {
		return &usagev1.UsageBatch{ProducerId: p, Seq: seq, Events: evs}
	}
	legacy := func(e *usagev1.UsageEvent) *usagev1.UsageBatch {
		return &usagev1.UsageBatch{Events: []*usagev1.UsageEvent{e}}
	}
	sc := streamScan{applied: map[string]map[uint64]bool{}, depts: map[string]*deptCount{}}
	for _, b := range []*usagev1.UsageBatch{
		legacy(ev("r1", "a", 10)),
		batch("p1", 1, ev("r2", "a", 20), ev("r3", "b", 30)),
		batch("p1", 1, ev("r2", "a", 20), ev("r3", "b", 30)), // republished
		batch("p2", 1, ev("r4", "a", 40)),                    // same seq, other producer
		batch("p1", 2, ev("r2", "a", 20)),                    // r2 applied twice: a duplicate
		legacy(ev("r1", "a", 10)),                            // a legacy copy: a duplicate
	} {
		sc.add(b)
	}
	a := sc.depts["a"]
	if a.events != 5 || len(a.requests) != 3 || a.cost != 70 || a.maxCost != 40 {
		t.Fatalf("dept a: %d events, %d requests, cost %d, max %d; want 5, 3, 70, 40", a.events, len(a.requests), a.cost, a.maxCost)
	}
	if b := sc.depts["b"]; b.events != 1 || b.cost != 30 {
		t.Fatalf("dept b: %d events, cost %d; want 1, 30", b.events, b.cost)
	}
	if sc.republished != 1 {
		t.Fatalf("%d republished, want 1", sc.republished)
	}
}
