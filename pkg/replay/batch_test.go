package replay

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// collect is a sink keeping every item.
type collect struct{ items []Item }

func (c *collect) Write(_ context.Context, items []Item) error {
	c.items = append(c.items, items...)
	return nil
}
func (c *collect) Close(context.Context) error { return nil }

// TestBatchesOnce: a replay hands each batch's events over once, at the
// batch's first appearance, even when the range starts between a batch and
// its republished copy (the messages before the range are read too).
func TestBatchesOnce(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	n := 0
	batch := func(p string, seq uint64, events int) *usagev1.UsageBatch {
		b := &usagev1.UsageBatch{ProducerId: p, Seq: seq}
		for range events {
			n++
			b.Events = append(b.Events, &usagev1.UsageEvent{EventId: fmt.Sprintf("ev-%d", n), Dept: "eng", CostNanoUsd: int64(n)})
		}
		return b
	}
	a1, a2, b1 := batch("pa", 1, 2), batch("pa", 2, 1), batch("pb", 1, 3)
	legacy := &usagev1.UsageEvent{EventId: "legacy", CostNanoUsd: 1000}
	// Stream: 1 a1, 2 b1, 3 legacy, 4 a1 again, 5 a2, 6 legacy again, 7 b1 again.
	for i, m := range []proto.Message{a1, b1, legacy, a1, a2, legacy, b1} {
		data, _ := proto.Marshal(m)
		subj := usage.Subject("eng")
		if b, ok := m.(*usagev1.UsageBatch); ok {
			subj = usage.BatchSubject(b.ProducerId)
		}
		// A distinct Nats-Msg-Id each: republished after the duplicate window.
		if _, err := js.Publish(ctx, subj, data, jetstream.WithMsgID(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(items []Item) (out []string) {
		for _, it := range items {
			id := fmt.Sprintf("%d:%s", it.Seq, it.Event.EventId)
			if it.Duplicate {
				id += "(dup)"
			}
			out = append(out, id)
		}
		return out
	}
	tests := []struct {
		name       string
		o          Options
		want       string
		dupBatches int
	}{
		{"all", Options{}, "[1:ev-1 1:ev-2 2:ev-4 2:ev-5 2:ev-6 3:legacy 5:ev-3 6:legacy]", 2},
		{"from between a copy and its republish", Options{FromSeq: 3}, "[3:legacy 5:ev-3 6:legacy]", 2},
		{"duplicates marked", Options{FromSeq: 4, ToSeq: 5, Duplicates: true}, "[4:ev-1(dup) 4:ev-2(dup) 5:ev-3]", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sink collect
			tc.o.Batch = 2
			st, err := Run(ctx, js, tc.o, &sink)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(ids(sink.items)); got != tc.want {
				t.Fatalf("items %s, want %s", got, tc.want)
			}
			if st.DuplicateBatches != tc.dupBatches || st.LostBatches != 0 || st.MissingBatches != 0 {
				t.Fatalf("stats %+v, want %d duplicate batches, none lost or missing", st, tc.dupBatches)
			}
		})
	}
}
