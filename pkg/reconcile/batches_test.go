package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/reconcile"
	"github.com/tollgate/tollgate/pkg/replay"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// sumSink sums what a replay hands over.
type sumSink struct{ n, cost int64 }

func (s *sumSink) Write(_ context.Context, items []replay.Item) error {
	for _, it := range items {
		s.n++
		s.cost += it.Event.CostNanoUsd
	}
	return nil
}
func (s *sumSink) Close(context.Context) error { return nil }

// TestRepublishPastDuplicateWindow is issue #13's deliver 2 for the budget
// totals, replay and reconcile: on a stream whose duplicate window is one
// second, batches of two producers reach the stream, the budget consumer
// stops, the window passes, two of the batches are published again (same
// producer, seq and Nats-Msg-Id: the stream stores them a second time), a
// new consumer starts and more batches follow. The spend totals, a replay
// of the stream and reconcile's stream count all agree on every event
// once, and reconcile reports the republished copies.
func TestRepublishPastDuplicateWindow(t *testing.T) {
	const window = time.Second
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{DuplicateWindow: window}); err != nil {
		t.Fatal(err)
	}
	if _, err := budget.EnsureBucket(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	consume := func() (stop func()) {
		c, err := budget.NewConsumer(js, budget.ConsumerOptions{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		var stopped bool
		stop = func() {
			if !stopped {
				stopped = true
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}
		}
		t.Cleanup(stop)
		return stop
	}

	var events, cost int64
	n := 0
	batch := func(p string, seq uint64, k int) *usagev1.UsageBatch {
		b := &usagev1.UsageBatch{ProducerId: p, Seq: seq, CreatedUnixMs: time.Now().UnixMilli()}
		for range k {
			n++
			dept := []string{"eng", "sales"}[n%2]
			b.Events = append(b.Events, &usagev1.UsageEvent{EventId: fmt.Sprintf("ev-%d", n), Timestamp: time.Now().UnixNano(),
				Dept: dept, Team: "t", KeyId: "k", CostNanoUsd: int64(1000 * n), PromptTokens: 10, StatusCode: 200})
			events++
			cost += int64(1000 * n)
		}
		return b
	}
	publish := func(b *usagev1.UsageBatch) {
		data, _ := proto.Marshal(b)
		ack, err := js.Publish(ctx, usage.BatchSubject(b.ProducerId), data, jetstream.WithMsgID(usage.BatchMsgID(b.ProducerId, b.Seq)))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate {
			t.Fatalf("batch %s:%d dropped as a duplicate", b.ProducerId, b.Seq)
		}
	}
	const p1, p2 = "gatewayone", "gatewaytwo"
	first := []*usagev1.UsageBatch{batch(p1, 1, 3), batch(p2, 1, 2), batch(p2, 2, 4), batch(p1, 2, 1)}
	stop := consume()
	for _, b := range first {
		publish(b)
	}
	agreed := func() reconcile.Report {
		t.Helper()
		rep, err := reconcile.Run(ctx, reconcile.Sources{JetStream: js, Budgets: true}, reconcile.Options{Wait: 10 * time.Second, Poll: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK {
			t.Fatalf("reconcile: %v", rep.Differences)
		}
		return rep
	}
	agreed()
	stop()

	time.Sleep(window + 500*time.Millisecond)
	publish(first[0]) // the spool drains what it had not seen acked
	publish(first[2])
	consume()
	publish(batch(p1, 3, 2))
	publish(batch(p2, 3, 1))

	rep := agreed()
	st, _ := rep.Source(reconcile.SourceStream)
	b, _ := rep.Source(reconcile.SourceBudgets)
	if st.Requests != events || st.CostNanoUSD != cost || b.Requests != events || b.CostNanoUSD != cost {
		t.Errorf("stream %d events %d nano, budgets %d, %d; want %d, %d", st.Requests, st.CostNanoUSD, b.Requests, b.CostNanoUSD, events, cost)
	}
	if st.Extra["raw_requests"] != events+7 || st.Extra["duplicates"] != 7 || st.Extra["duplicate_batches"] != 2 ||
		st.Extra["lost_batches"] != 0 || st.Extra["missing_batches"] != 0 {
		t.Errorf("stream figures %v, want the 2 republished batches (7 events) reported", st.Extra)
	}
	var sum sumSink
	rst, err := replay.Run(ctx, js, replay.Options{}, &sum)
	if err != nil {
		t.Fatal(err)
	}
	if sum.n != events || sum.cost != cost || rst.DuplicateBatches != 2 || rst.Batches != 6 {
		t.Errorf("replay: %d events, %d nano, %+v; want %d, %d", sum.n, sum.cost, rst, events, cost)
	}
}
