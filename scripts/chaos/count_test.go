package main

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
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

// TestStreamScanHistoryChange: when the stream no longer holds, at the
// scan point, the message the rig read there (acknowledged messages lost
// and their sequences given to new ones), the rig counts the stream again
// rather than skip the messages at the reused sequences.
func TestStreamScanHistoryChange(t *testing.T) {
	ctx := t.Context()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(seqs ...uint64) {
		t.Helper()
		for _, seq := range seqs {
			b := &usagev1.UsageBatch{ProducerId: "p1", Seq: seq, Events: []*usagev1.UsageEvent{
				{EventId: fmt.Sprint("ev-", seq), RequestId: fmt.Sprint("req-", seq), Dept: "a", CostNanoUsd: 10}}}
			data, err := proto.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, usage.BatchSubject("p1"), data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	publish(1, 2, 3)
	r := &rig{js: js}
	var c counts
	if err := r.countStream(ctx, "a", &c); err != nil {
		t.Fatal(err)
	}
	if c.StreamUnique != 3 || r.scan.rescans != 0 {
		t.Fatalf("first scan: %d requests, %d rescans; want 3, 0", c.StreamUnique, r.scan.rescans)
	}

	// The same stream read again: nothing changed, nothing is counted twice.
	if err := r.countStream(ctx, "a", &c); err != nil {
		t.Fatal(err)
	}
	if c.StreamUnique != 3 || c.StreamMsgs != 3 || r.scan.rescans != 0 {
		t.Fatalf("second scan: %d requests, %d events, %d rescans; want 3, 3, 0", c.StreamUnique, c.StreamMsgs, r.scan.rescans)
	}

	// Batch 3 (stream seq 3) is lost; batches 4 and 5 take seqs 3 and 4.
	if err := js.DeleteStream(ctx, usage.StreamName); err != nil {
		t.Fatal(err)
	}
	natstest.Recreate(t, func() error { return usage.EnsureStream(ctx, js, usage.StreamConfig{}) })
	publish(1, 2, 4, 5)
	if err := r.countStream(ctx, "a", &c); err != nil {
		t.Fatal(err)
	}
	// Read on from seq 4 only, the rig would count 4 requests with batch 3
	// and without batch 4: the right count with the wrong events.
	d := r.scan.depts["a"]
	if c.StreamUnique != 4 || r.scan.rescans != 1 || d.requests["req-3"] || !d.requests["req-4"] {
		t.Fatalf("after the change: %d requests %v, %d rescans; want req-1, req-2, req-4, req-5 and 1 rescan",
			c.StreamUnique, d.requests, r.scan.rescans)
	}
}
