package budget

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
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
	testkit.Wait(t, 10*time.Second, "the condition", func() bool { return metricValue(t, c.m.dupBatches) == 3 })
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
	testkit.Wait(t, time.Minute, "the condition", func() bool { return metricValue(t, c.m.lostBatches) == 1 && metricValue(t, c.m.missing) == 0 })
	e.waitConsumed(t, Durable)
	// It arrives after all: too late, never applied.
	e.publishBatch(t, late, "")
	testkit.Wait(t, 10*time.Second, "the condition", func() bool { return metricValue(t, c.m.dupBatches) == 4 })
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

// TestConsumerHistoryChanged: the stream the totals were folded from
// loses its last messages after they were folded and acknowledged
// (recreated here; a cluster whose every node is killed at once can do the
// same) and new batches take their sequences. The totals skip events at
// or below their as_of_seq, so the consumer publishes those batches again
// and folds the copies: every batch counts once, the lost ones too (they
// were in the totals before). Whether the new history reaches past what
// was folded at once, or only later. A restart on an unchanged stream
// publishes nothing.
func TestConsumerHistoryChanged(t *testing.T) {
	for _, tc := range []struct {
		name        string
		first, then []uint64 // batch seqs stored before and after the consumer starts
	}{
		{"new batches reach past the folded point", []uint64{1, 2, 3, 7, 8, 9, 10}, nil},
		{"stream ends below the folded point for a while", []uint64{1, 2, 3, 7, 8}, []uint64{9, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t)
			publish := func(seqs ...uint64) uint64 { return e.publishBatches(t, testProducers[0], seqs...) }
			requests := func() uint64 { return e.deptRequests(t, "eng") }

			// Each consumer runs on its own connection, closed when it
			// stops, as a process's would be.
			start := func(o ConsumerOptions) (*Consumer, func()) {
				nc, err := nats.Connect(e.ns.ClientURL())
				if err != nil {
					t.Fatal(err)
				}
				js, err := jetstream.New(nc)
				if err != nil {
					t.Fatal(err)
				}
				c := newConsumer(t, js, o)
				stop := run(t, c)
				return c, func() {
					if err := stop(); err != nil {
						t.Fatal(err)
					}
					nc.Close()
				}
			}
			_, stop := start(ConsumerOptions{})
			e.waitApplied(t, publish(1, 2, 3, 4, 5))
			e.waitConsumed(t, Durable)
			stop()
			// A restart on the same stream: batch 6 is folded after the check.
			c, stop := start(ConsumerOptions{})
			e.waitApplied(t, publish(6))
			e.waitConsumed(t, Durable)
			stop()
			if n, r := metricValue(t, c.m.historyChanges)+metricValue(t, c.m.historyRepublished), requests(); n != 0 || r != 6 {
				t.Fatalf("unchanged stream: %v changes and copies, %d requests; want 0, 6", n, r)
			}

			// Batches 4-6 (stream seqs 4-6) are lost; 7 and on take their sequences.
			e.recreateStream(t)
			publish(tc.first...)
			var log bytes.Buffer
			c, stop = start(ConsumerOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if tc.then != nil {
				e.waitConsumed(t, Durable) // the stream still ends at seq 5
				// and the consumer has seen it so: its first check found the
				// stream short (on a slow machine it may start after the
				// durable looks consumed).
				testkit.Wait(t, 10*time.Second, "the condition", func() bool { return metricValue(t, c.m.historyChanges) >= 1 })
				if r := requests(); r != 6 {
					t.Fatalf("while the stream ends below the folded point: %d requests, want 6", r)
				}
				publish(tc.then...)
			}
			testkit.Wait(t, 10*time.Second, "the condition", func() bool { return requests() >= 10 })
			e.waitConsumed(t, Durable)
			stop()
			if r := requests(); r != 10 {
				t.Fatalf("dept total counts %d requests, want 10 (batches 1-10 once each)", r)
			}
			if n := metricValue(t, c.m.historyRepublished); n != 3 {
				t.Fatalf("history_republished_batches_total %v, want 3 (batches 7, 8 and 9, at or below stream seq 6)", n)
			}
			if n := metricValue(t, c.m.historyChanges); n != 1 {
				t.Fatalf("history_changes_total %v, want 1", n)
			}
			s := log.String()
			if !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "folded_seq=6") || !strings.Contains(s, "republished_batches=3") {
				t.Fatalf("log does not report the change (folded_seq=6, republished_batches=3):\n%s", s)
			}
			if short := strings.Contains(s, "stream_last_seq=5"); short != (tc.then != nil) {
				t.Fatalf("log says the stream ended at seq 5: %v, want %v:\n%s", short, tc.then != nil, s)
			}
		})
	}
}

// TestConsumerChecksHistoryAfterReconnect: a NATS restart does not always
// fail a fetch (the client reconnects and pulls again), and a restart is
// when a cluster can lose its last messages; so a reconnect makes the
// consumer check the stream's history before its next fold.
func TestConsumerChecksHistoryAfterReconnect(t *testing.T) {
	e := startEnv(t)
	c := newConsumer(t, e.js, ConsumerOptions{})
	run(t, c)
	p := testProducers[0]
	e.waitApplied(t, e.publishBatches(t, p, 1))
	if n := metricValue(t, c.m.historyChecks); n != 1 {
		t.Fatalf("history_checks_total %v after the first fold, want 1", n)
	}
	e.restartServer(t)
	testkit.Wait(t, 10*time.Second, "the reconnect", e.nc.IsConnected)
	var seq uint64
	testkit.Wait(t, 10*time.Second, "the condition", func() bool { // publishes fail until JetStream is back
		data := mustMarshal(t, e.batch(p, 2, knownEvents[0]))
		ack, err := e.js.Publish(context.Background(), usage.BatchSubject(p), data, jetstream.WithMsgID(usage.BatchMsgID(p, 2)))
		if err == nil {
			seq = ack.Sequence
		}
		return err == nil
	})
	e.waitApplied(t, seq)
	if n := metricValue(t, c.m.historyChecks); n != 2 {
		t.Fatalf("history_checks_total %v after the reconnect and the next fold, want 2", n)
	}
}

// TestConsumerSurvivesRecreatedStream: the stream (and with it the
// durable consumer) is deleted and created again while the consumer runs,
// and new batches take the sequences of folded ones. The running consumer
// creates its durable consumer again, and folds every new batch once, as
// soon as the stream has passed what was folded.
func TestConsumerSurvivesRecreatedStream(t *testing.T) {
	e := startEnv(t)
	c := newConsumer(t, e.js, ConsumerOptions{NakDelay: 50 * time.Millisecond})
	run(t, c)
	e.waitApplied(t, e.publishBatches(t, testProducers[0], 1, 2, 3, 4, 5))
	e.recreateStream(t)
	// Stream seqs 1-6: 1-5 at or below the folded seq 5, so their batches
	// are published again once seq 6 took the stream past it.
	e.publishBatches(t, testProducers[0], 6, 7, 8, 9, 10, 11)
	testkit.Wait(t, 10*time.Second, "the condition", func() bool { return e.deptRequests(t, "eng") >= 11 })
	e.waitConsumed(t, Durable)
	if r := e.deptRequests(t, "eng"); r != 11 {
		t.Fatalf("dept total counts %d requests, want 11 (batches 1-11 once each)", r)
	}
	if n := metricValue(t, c.m.historyRepublished); n != 5 {
		t.Fatalf("history_republished_batches_total %v, want 5", n)
	}
}

// TestConsumerCrashBetweenCheckpoints: an instance crashes after the first
// of a fold's checkpoint writes (one per producer). That write is the
// checkpoint of the producer whose batch is the fold's last message, so an
// instance started before the fold's messages are delivered again finds
// the batch at the highest sequence covered applied, publishes nothing
// again, and the totals count each batch once.
func TestConsumerCrashBetweenCheckpoints(t *testing.T) {
	e := startEnv(t)
	ps := append(slices.Clone(testProducers), "gw3ccccccccccccc", "gw4ddddddddddddd")
	for _, p := range ps { // one fold; its last message is ps[3]'s batch
		e.publishBatches(t, p, 1)
	}
	c := newConsumer(t, e.js, ConsumerOptions{Batch: 10})
	var first string
	c.afterCheckpoint = func(p string) error {
		first = p
		return errCrash
	}
	if err := c.Run(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("Run = %v, want the simulated crash", err)
	}
	if first != ps[3] {
		t.Errorf("first checkpoint written: %s, want %s, whose batch is the fold's last message", first, ps[3])
	}
	c2 := newConsumer(t, e.js, ConsumerOptions{Batch: 10, AckWait: time.Second})
	run(t, c2)
	testkit.Wait(t, 10*time.Second, "the condition", func() bool { return e.deptRequests(t, "eng") >= 4 })
	e.waitConsumed(t, Durable)
	if n := metricValue(t, c2.m.historyRepublished); n != 0 {
		t.Errorf("%v batches published again, want 0", n)
	}
	if r := e.deptRequests(t, "eng"); r != 4 {
		t.Errorf("dept total counts %d requests, want 4 (each batch once)", r)
	}
}

// TestConsumerHistoryTornCheckpoints: a fold writes one checkpoint per
// producer, one after the other. An instance that starts while another is
// between those writes reads a checkpoint that already covers the fold's
// last message and one that does not yet hold that message's batch. That
// is no change of history: the check reads the checkpoints again, finds
// the batch applied, and publishes nothing again.
func TestConsumerHistoryTornCheckpoints(t *testing.T) {
	e := startEnv(t)
	p, q := testProducers[0], testProducers[1]
	c0 := newConsumer(t, e.js, ConsumerOptions{})
	stop := run(t, c0)
	e.publishBatches(t, p, 1)
	e.waitApplied(t, e.publishBatches(t, q, 1))
	e.waitConsumed(t, Durable)
	dedup := c0.dedupKV                               // the checkpoints' bucket
	before, err := dedup.Get(context.Background(), q) // q's Window with batch 1 only
	if err != nil {
		t.Fatal(err)
	}
	e.publishBatches(t, p, 2)
	e.waitApplied(t, e.publishBatches(t, q, 2)) // the last message: q's batch 2
	e.waitConsumed(t, Durable)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	after, err := dedup.Get(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	// The torn state: p's checkpoint covers q's batch 2, q's does not hold it.
	if _, err := dedup.Put(context.Background(), q, before.Value()); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, e.js, ConsumerOptions{})
	var torn atomic.Bool
	c.beforeHistoryReload = func() { // the other instance writes q's checkpoint
		torn.Store(true)
		if _, err := dedup.Put(context.Background(), q, after.Value()); err != nil {
			t.Error(err)
		}
	}
	run(t, c)
	e.waitApplied(t, e.publishBatches(t, p, 3))
	e.waitConsumed(t, Durable)
	if !torn.Load() {
		t.Fatal("the check did not find q's batch 2 unapplied: the torn state was not read")
	}
	if n := metricValue(t, c.m.historyRepublished); n != 0 {
		t.Errorf("%v batches published again, want 0", n)
	}
	if r := e.deptRequests(t, "eng"); r != 5 {
		t.Errorf("dept total counts %d requests, want 5 (each batch once)", r)
	}
}
