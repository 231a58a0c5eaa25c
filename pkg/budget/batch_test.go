package budget

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestConsumerRepublishPastDuplicateWindow is issue #13's deliver 2 for
// the spend totals: a batch whose first publish reached the stream is
// published again (same producer, same seq, same Nats-Msg-Id) after the
// stream's duplicate window, as a spool drain after a long outage does. The
// stream stores it twice; the totals count it once, whether the same
// Consumer sees both copies or a restarted one sees the second.
func TestConsumerRepublishPastDuplicateWindow(t *testing.T) {
	const window = time.Second
	for _, restart := range []bool{false, true} {
		name := "one consumer"
		if restart {
			name = "consumer restarted between the copies"
		}
		t.Run(name, func(t *testing.T) {
			e := startEnvDup(t, window)
			b := e.batch("gw1aaaaaaaaaaaaa", 1, knownEvents[:3]...)
			first := e.publishBatch(t, b, "")
			stop := run(t, newConsumer(t, e.js, ConsumerOptions{}))
			e.waitApplied(t, first)
			e.waitConsumed(t, Durable)
			if restart {
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(window + 500*time.Millisecond)
			again := e.publishBatch(t, b, "") // publishBatch fails the test if the stream drops it
			if again == first {
				t.Fatalf("republish stored at %d, the first copy's sequence", again)
			}
			if restart {
				run(t, newConsumer(t, e.js, ConsumerOptions{}))
			}
			next := e.batch("gw1aaaaaaaaaaaaa", 2, knownEvents[3:]...)
			last := e.publishBatch(t, next, "")
			e.waitApplied(t, last)
			e.waitConsumed(t, Durable)
			if n := e.streamMsgs(t); n != 3 {
				t.Fatalf("stream holds %d messages, want 3 (both copies of batch 1, then batch 2)", n)
			}
			e.checkTotals(t, knownWant)
			e.checkAll(t, knownEvents)
		})
	}
}

// TestConsumerBatchOrderAndGaps: producers interleaved, batches out of
// order within the window, republished copies, a batch that never comes
// (missing, then given up as lost when the window moves past it) and
// arrives after all: each batch counts once, the late one never, and the
// metrics say so.
func TestConsumerBatchOrderAndGaps(t *testing.T) {
	e := startEnv(t)
	reg := prometheus.NewRegistry()
	c := newConsumer(t, e.js, ConsumerOptions{Batch: 100, Registerer: reg})
	run(t, c)
	const a, b, z = "producer-a", "producer-b", "producer-z"
	evs := bulkEvents(12)
	batches := map[string]*usagev1.UsageBatch{}
	mk := func(p string, seq uint64, evs ...ev) *usagev1.UsageBatch {
		x := e.batch(p, seq, evs...)
		batches[usage.BatchMsgID(p, seq)] = x
		return x
	}
	mk(a, 1, evs[0:2]...)
	mk(b, 1, evs[2])
	mk(a, 2, evs[3])
	mk(a, 3, evs[4])
	mk(b, 2, evs[5:7]...)
	mk(b, 3, evs[7])
	mk(z, 1, evs[8])
	mk(z, 3, evs[9])
	late := e.batch(z, 2, evs[10:12]...) // never counted
	var counted uint64                   // the last first copy
	sent := map[string]bool{}
	for i, id := range []string{"producer-a:1", "producer-b:1", "producer-a:3", "producer-b:3", "producer-a:1",
		"producer-b:2", "producer-a:2", "producer-b:1", "producer-z:1", "producer-z:3", "producer-a:3"} {
		seq := e.publishBatch(t, batches[id], "-copy"+itoa(i))
		if !sent[id] {
			sent[id], counted = true, seq
		}
	}
	e.waitApplied(t, counted)
	e.waitConsumed(t, Durable)
	e.checkAll(t, evs[:10])
	waitFor(t, 10*time.Second, func() bool { return metricValue(t, c.m.dupBatches) == 3 })
	if got := metricValue(t, c.m.dupBatches); got != 3 {
		t.Errorf("duplicate batches %v, want 3", got)
	}
	if got := metricValue(t, c.m.missing); got != 1 {
		t.Errorf("missing batches %v, want 1 (producer-z:2)", got)
	}

	// Producer z moves on by a whole window: z:2 is given up.
	for seq := uint64(4); seq <= 2+usage.WindowSize; seq++ {
		data := e.batch(z, seq)
		if _, err := e.js.PublishAsync(usage.BatchSubject(z), mustMarshal(t, data)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publish did not complete")
	}
	// The metrics change just after the acks: wait for them.
	waitFor(t, time.Minute, func() bool { return metricValue(t, c.m.lostBatches) == 1 && metricValue(t, c.m.missing) == 0 })
	e.waitConsumed(t, Durable)
	// It arrives after all: too late, never applied.
	e.publishBatch(t, late, "")
	waitFor(t, 10*time.Second, func() bool { return metricValue(t, c.m.dupBatches) == 4 })
	if got := metricValue(t, c.m.lostBatches); got != 1 {
		t.Errorf("lost batches %v, want 1", got)
	}
	e.checkAll(t, evs[:10])

	// A restarted consumer (and a fresh durable) agree from the checkpoints.
	run(t, newConsumer(t, e.newJS(t), ConsumerOptions{Durable: "budget-again"}))
	e.waitConsumed(t, "budget-again")
	e.checkAll(t, evs[:10])
}

// TestCheckpointEncoding round-trips a checkpoint and refuses damaged ones.
func TestCheckpointEncoding(t *testing.T) {
	var w usage.Window
	for _, s := range []uint64{1, 2, 5, 300} {
		w.Apply(s)
	}
	data := appendCheckpoint(nil, 12345, &w)
	var got usage.Window
	cover, err := parseCheckpoint(data, &got)
	if err != nil || cover != 12345 || got != w {
		t.Fatalf("round trip: cover %d, err %v, window equal %v", cover, err, got == w)
	}
	for _, bad := range [][]byte{nil, {0x80}, data[:len(data)-1], append(data, 0)} {
		if _, err := parseCheckpoint(bad, &got); err == nil {
			t.Errorf("%x decoded", bad)
		}
	}
}

func mustMarshal(tb testing.TB, b *usagev1.UsageBatch) []byte {
	tb.Helper()
	data, err := proto.Marshal(b)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// metricValue reads a counter or gauge.
func metricValue(tb testing.TB, m prometheus.Metric) float64 {
	tb.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		tb.Fatal(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// TestConsumerHistoryChanged: the stream the totals were folded from is
// gone (recreated here; a cluster whose every node is killed at once can
// lose its last acknowledged messages the same way) and new batches took
// the sequences of the old ones. The totals skip those sequences, so a
// consumer starting on it must say so: history_changes_total and an error
// log naming the first reused sequence. A restart on an unchanged stream
// says nothing.
func TestConsumerHistoryChanged(t *testing.T) {
	e := startEnv(t)
	const p = "gw1aaaaaaaaaaaaa"
	var last uint64
	for seq := uint64(1); seq <= 5; seq++ {
		last = e.publishBatch(t, e.batch(p, seq, knownEvents[0]), "")
	}
	stop := run(t, newConsumer(t, e.js, ConsumerOptions{}))
	e.waitApplied(t, last)
	e.waitConsumed(t, Durable)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	start := func() (*Consumer, *bytes.Buffer, func() error) {
		var log bytes.Buffer
		c := newConsumer(t, e.js, ConsumerOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		return c, &log, run(t, c)
	}
	c, _, stop := start()
	last = e.publishBatch(t, e.batch(p, 6, knownEvents[0]), "") // folded once the start's check is done
	e.waitApplied(t, last)
	if n := metricValue(t, c.m.historyChanges); n != 0 {
		t.Fatalf("unchanged stream: history_changes_total %v, want 0", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	if err := e.js.DeleteStream(ctx, Stream); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: Stream, Subjects: []string{"tollgate.usage.>"}}); err != nil {
		t.Fatal(err)
	}
	// Batches 7 and 8 take stream seqs 4 and 5; the folds reached seq 6.
	for _, seq := range []uint64{1, 2, 3, 7, 8} {
		e.publishBatch(t, e.batch(p, seq, knownEvents[0]), "")
	}
	c, log, stop := start()
	waitFor(t, 5*time.Second, func() bool { return metricValue(t, c.m.historyChanges) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := log.String(); !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "folded_seq=6") || !strings.Contains(s, "from_seq=4") {
		t.Fatalf("log does not name the reused sequences (folded_seq=6, from_seq=4):\n%s", s)
	}
}
