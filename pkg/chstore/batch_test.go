package chstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// testBatch is test events from..to-1 as batch seq of producer.
func testBatch(producer string, seq uint64, from, to int) *usagev1.UsageBatch {
	b := &usagev1.UsageBatch{ProducerId: producer, Seq: seq, CreatedUnixMs: baseTS / 1e6}
	for i := from; i < to; i++ {
		b.Events = append(b.Events, testEvent(i))
	}
	return b
}

// publishBatch publishes test events from..to-1 as batch seq of producer,
// the way the gateway does (its subject and Nats-Msg-Id), and returns the
// ack: Duplicate is set when the stream dropped it within its duplicate
// window.
func publishBatch(t testing.TB, js jetstream.JetStream, producer string, seq uint64, from, to int) *jetstream.PubAck {
	t.Helper()
	data, err := proto.Marshal(testBatch(producer, seq, from, to))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, usage.BatchSubject(producer), data, jetstream.WithMsgID(usage.BatchMsgID(producer, seq)))
	if err != nil {
		t.Fatalf("publish batch %s:%d: %v", producer, seq, err)
	}
	return ack
}

// republish publishes batch seq of producer again, with the same
// Nats-Msg-Id, once the stream's duplicate window (set short) has passed,
// so that the stream stores it a second time under a new sequence, as
// after a gateway held it in its spool longer than the window.
func republish(t testing.TB, js jetstream.JetStream, producer string, seq uint64, from, to int) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ack := publishBatch(t, js, producer, seq, from, to)
		if !ack.Duplicate {
			return ack.Sequence
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s:%d still dropped as a duplicate", producer, seq)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streamConfig returns the usage stream's configuration.
func streamConfig(ctx context.Context, t testing.TB, js jetstream.JetStream) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config
}

// shortDuplicateWindow sets the usage stream's duplicate window to 100ms.
func shortDuplicateWindow(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg := streamConfig(ctx, t, js)
	cfg.Duplicates = 100 * time.Millisecond
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("update stream: %v", err)
	}
}

// batchPlan publishes test events 0..n-1 in batches of per events,
// alternating between two producers (each numbering its own batches from
// 1), with every fifth batch's events published as legacy single-event
// messages instead. It returns the batches published.
type planned struct {
	producer string
	seq      uint64
	from, to int
}

func publishPlan(t testing.TB, js jetstream.JetStream, n, per int) []planned {
	t.Helper()
	producers := []string{"gwaaaaaaaaaaaaaa", "gwbbbbbbbbbbbbbb"}
	var seqs [2]uint64
	var out []planned
	for i, k := 0, 0; i < n; i, k = i+per, k+1 {
		to := min(i+per, n)
		if k%5 == 4 {
			publish(t, js, i, to)
			continue
		}
		p := k % 2
		seqs[p]++
		publishBatch(t, js, producers[p], seqs[p], i, to)
		out = append(out, planned{producers[p], seqs[p], i, to})
	}
	return out
}

// runUntilLoaded runs l until the stored watermark reaches the stream's
// last sequence, then stops it.
func runUntilLoaded(t *testing.T, js jetstream.JetStream, s *Store, l *Loader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := start(l.Run)
	waitWatermark(t, s, info.State.LastSeq, r.done)
	if err := r.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// checkSources fails t unless every row's producer_id and batch_seq are
// those of the batch that carried its event (” and 0 for legacy ones).
func checkSources(t *testing.T, s *Store, plan []planned, n int) {
	t.Helper()
	want := make(map[string]planned, n)
	for _, p := range plan {
		for i := p.from; i < p.to; i++ {
			want[testEvent(i).EventId] = p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rows []struct {
		EventID  string `ch:"event_id"`
		Producer string `ch:"producer_id"`
		BatchSeq uint64 `ch:"batch_seq"`
	}
	if err := s.conn.Select(ctx, &rows, "SELECT event_id, producer_id, batch_seq FROM usage_events"); err != nil {
		t.Fatal(err)
	}
	if len(rows) != n {
		t.Fatalf("%d rows, want %d", len(rows), n)
	}
	for _, r := range rows {
		p := want[r.EventID]
		if r.Producer != p.producer || r.BatchSeq != p.seq {
			t.Fatalf("event %s stored from %q:%d, want %q:%d", r.EventID, r.Producer, r.BatchSeq, p.producer, p.seq)
		}
	}
}

// TestBatches loads batched messages, mixed with legacy single events, and
// shows each batch applied once however often the stream holds it.
func TestBatches(t *testing.T) {
	const n, per = 1000, 37
	tests := []struct {
		name string
		// republish picks the planned batches published again past the
		// duplicate window, after the first run when restart is set.
		republish func(plan []planned) []planned
		restart   bool
		// crash arms the first run to die after its second insert, before
		// the watermark.
		crash bool
		batch int // loader batch size
	}{
		{name: "batches of several events and legacy events", batch: 200},
		{name: "republished past the duplicate window, same fetch", batch: 5000,
			republish: func(p []planned) []planned { return []planned{p[2], p[7], p[2]} }},
		{name: "republished past the duplicate window, later batches", batch: 100,
			republish: func(p []planned) []planned { return []planned{p[0], p[len(p)-1]} }},
		{name: "republished after a restart", batch: 100, restart: true,
			republish: func(p []planned) []planned { return []planned{p[1], p[len(p)-2]} }},
		{name: "crash after insert, before watermark, then republished", batch: 100, crash: true, restart: true,
			republish: func(p []planned) []planned { return p[:6] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js, s := newJS(t), newStore(t, ch.Addr(t))
			shortDuplicateWindow(t, js)
			plan := publishPlan(t, js, n, per)
			var again []planned
			if tt.republish != nil {
				again = tt.republish(plan)
			}
			if !tt.restart {
				for _, p := range again {
					republish(t, js, p.producer, p.seq, p.from, p.to)
				}
			}
			l, err := NewLoader(s, js, testOptions(tt.batch))
			if err != nil {
				t.Fatal(err)
			}
			if tt.crash {
				l.afterInsert = crashOn(2)
				r := start(l.Run)
				select {
				case err := <-r.done:
					if !errors.Is(err, errCrash) {
						t.Fatalf("first run: %v, want the crash", err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("first run did not end")
				}
			} else {
				runUntilLoaded(t, js, s, l)
			}
			republished := metricValue(l.m.republished)
			if tt.restart {
				for _, p := range again {
					republish(t, js, p.producer, p.seq, p.from, p.to)
				}
				if l, err = NewLoader(s, js, testOptions(tt.batch)); err != nil {
					t.Fatal(err)
				}
				runUntilLoaded(t, js, s, l)
				republished += metricValue(l.m.republished)
			}
			checkExact(t, s, expect(0, n))
			checkSources(t, s, plan, n)
			if republished != float64(len(again)) {
				t.Fatalf("%v batches skipped as republished, want %d", republished, len(again))
			}
			if got := metricValue(l.m.lostBatches); got != 0 {
				t.Fatalf("%v batches given up as lost, want 0", got)
			}
		})
	}
}

func TestWindowsEncoding(t *testing.T) {
	var d usage.Dedup
	d.Apply("gwaaaaaaaaaaaaaa", 1)
	d.Apply("gwaaaaaaaaaaaaaa", 2)
	d.Apply("gwaaaaaaaaaaaaaa", 900) // a hole: a long bitmap
	for s := uint64(1); s <= 70; s += 3 {
		d.Apply("gwbbbbbbbbbbbbbb", s)
	}
	d.Apply("z", 1)
	tests := []struct {
		name string
		d    *usage.Dedup
	}{
		{name: "empty", d: &usage.Dedup{}},
		{name: "short and long windows", d: &d},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := appendWindows(nil, tt.d)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeWindows(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got.Len() != tt.d.Len() {
				t.Fatalf("%d producers, want %d", got.Len(), tt.d.Len())
			}
			for _, p := range tt.d.Producers() {
				w, g := tt.d.Window(p), got.Window(p)
				if w.Floor() != g.Floor() || w.Top() != g.Top() || w.Missing() != g.Missing() {
					t.Fatalf("producer %s: floor/top/missing %d/%d/%d, want %d/%d/%d", p,
						g.Floor(), g.Top(), g.Missing(), w.Floor(), w.Top(), w.Missing())
				}
				for s := uint64(1); s <= w.Top()+1; s++ {
					if w.Seen(s) != g.Seen(s) {
						t.Fatalf("producer %s seq %d: seen %v, want %v", p, s, g.Seen(s), w.Seen(s))
					}
				}
			}
			if len(b) > 1 { // (an empty encoding is the empty Dedup)
				if _, err := decodeWindows(b[:len(b)-1]); err == nil {
					t.Fatal("a truncated encoding decoded")
				}
			}
		})
	}
}

func TestCountEvents(t *testing.T) {
	enc := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		data []byte
		want int
	}{
		{name: "legacy event", data: enc(testEvent(1)), want: 1},
		{name: "batch of 3", data: enc(testBatch("gwaaaaaaaaaaaaaa", 1, 0, 3)), want: 3},
		{name: "batch of 100", data: enc(testBatch("gwaaaaaaaaaaaaaa", 1, 0, 100)), want: 100},
		{name: "empty batch", data: enc(testBatch("gwaaaaaaaaaaaaaa", 1, 0, 0)), want: 1},
		{name: "malformed", data: []byte{0xff, 0xff}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := countEvents(tt.data); got != tt.want {
				t.Fatalf("countEvents = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestHistoryChangedBelowWatermark: the stream lost its last messages (a
// whole cluster killed before they reached a disk) or was recreated, and
// the messages published since took their sequences, up to and past the
// watermark. The loader loads the batches it never applied and skips the
// ones it had, instead of taking every sequence up to the watermark as
// stored.
func TestHistoryChangedBelowWatermark(t *testing.T) {
	js, s := newJS(t), newStore(t, ch.Addr(t))
	var wm uint64
	for seq := uint64(1); seq <= 10; seq++ {
		wm = publishBatch(t, js, "p1", seq, int(seq-1)*10, int(seq)*10).Sequence
	}
	loadUntil(t, s, js, testOptions(50), wm)
	checkExact(t, s, expect(0, 100))

	// The stream starts over. Its first messages are the last two batches
	// again (a gateway republishes what it has no ack for), then ten new
	// ones: sequences 1 to 12, over the watermark of 10.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := streamConfig(ctx, t, js)
	if err := js.DeleteStream(ctx, DefaultStream); err != nil {
		t.Fatal(err)
	}
	natstest.Recreate(t, func() error { _, err := js.CreateStream(ctx, cfg); return err })
	var last uint64
	for seq := uint64(9); seq <= 20; seq++ {
		last = publishBatch(t, js, "p1", seq, int(seq-1)*10, int(seq)*10).Sequence
	}
	if last <= wm {
		t.Fatalf("last sequence %d, want over the watermark %d", last, wm)
	}

	l2 := loadUntil(t, s, js, testOptions(50), last)
	checkExact(t, s, expect(0, 200))
	if got := metricValue(l2.m.historyChanges); got != 1 {
		t.Fatalf("history changes %v, want 1", got)
	}
}
