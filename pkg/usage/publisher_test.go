package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

func TestSubject(t *testing.T) {
	tests := []struct {
		name, dept, want string
	}{
		{name: "plain", dept: "finance", want: "tollgate.usage.finance"},
		{name: "empty", dept: "", want: "tollgate.usage._none"},
		{name: "dots", dept: "eu.finance", want: "tollgate.usage.eu_finance"},
		{name: "wildcards", dept: "a*b>c", want: "tollgate.usage.a_b_c"},
		{name: "white space", dept: "r d\tx\ny", want: "tollgate.usage.r_d_x_y"},
		{name: "unicode kept", dept: "Forschung-ü", want: "tollgate.usage.Forschung-ü"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Subject(tt.dept); got != tt.want {
				t.Errorf("Subject(%q) = %q, want %q", tt.dept, got, tt.want)
			}
		})
	}
}

func TestEnsureStream(t *testing.T) {
	tests := []struct {
		name string
		cfg  StreamConfig
		want StreamConfig
	}{
		{name: "defaults", want: StreamConfig{Replicas: 1, MaxAge: 400 * 24 * time.Hour, DuplicateWindow: 2 * time.Minute}},
		{
			name: "configured",
			cfg:  StreamConfig{MaxAge: 30 * 24 * time.Hour, DuplicateWindow: 10 * time.Minute},
			want: StreamConfig{Replicas: 1, MaxAge: 30 * 24 * time.Hour, DuplicateWindow: 10 * time.Minute},
		},
	}
	srv := startServer(t)
	_, js := connect(t, srv, Config{}) // creates the stream with defaults
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// Twice: the second call must be a no-op update.
			for range 2 {
				if err := EnsureStream(ctx, js, tt.cfg); err != nil {
					t.Fatalf("ensure stream: %v", err)
				}
			}
			st, err := js.Stream(ctx, StreamName)
			if err != nil {
				t.Fatal(err)
			}
			c := st.CachedInfo().Config
			got := StreamConfig{Replicas: c.Replicas, MaxAge: c.MaxAge, DuplicateWindow: c.Duplicates}
			if got != tt.want {
				t.Errorf("stream config %+v, want %+v", got, tt.want)
			}
			if !slices.Equal(c.Subjects, []string{"tollgate.usage.>"}) || c.Storage != jetstream.FileStorage {
				t.Errorf("subjects %v storage %v", c.Subjects, c.Storage)
			}
		})
	}
}

// acks records OnAck calls.
type acks struct {
	mu   sync.Mutex
	seqs map[string]uint64
	list []uint64
}

func (a *acks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.list)
}

func (a *acks) onAck(eventID string, seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seqs == nil {
		a.seqs = make(map[string]uint64)
	}
	a.seqs[eventID] = seq
	a.list = append(a.list, seq)
}

func (a *acks) check(t *testing.T, msgs []stored) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	// The events of one batch share its sequence; batches come in order.
	for i := 1; i < len(a.list); i++ {
		if a.list[i] < a.list[i-1] {
			t.Fatalf("OnAck sequence %d after %d (at %d of %d: %v)", a.list[i], a.list[i-1], i, len(a.list), a.list[max(0, i-5):min(len(a.list), i+5)])
		}
	}
	if len(a.list) != len(msgs) {
		t.Errorf("OnAck called %d times for %d messages", len(a.list), len(msgs))
	}
	for _, m := range msgs {
		if got := a.seqs[m.ev.GetEventId()]; got != m.seq {
			t.Errorf("event %s: OnAck seq %d, stream seq %d", m.ev.GetEventId(), got, m.seq)
		}
	}
}

func closePublisher(t *testing.T, p *Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func TestPublishDelivers(t *testing.T) {
	tests := []struct {
		name  string
		depts []string
		n     int
		gap   time.Duration // between Enqueue calls
		cfg   Config
	}{
		{name: "one dept", depts: []string{"finance"}, n: 200},
		{name: "mixed depts", depts: []string{"finance", "", "eu.sales", "r d"}, n: 400},
		{name: "small batches and window", depts: []string{"ops"}, n: 300, cfg: Config{BatchSize: 3, MaxPending: 5}},
		{name: "no flush delay", depts: []string{"finance", "eu.sales"}, n: 300, gap: 10 * time.Microsecond, cfg: Config{FlushDelay: -1}},
		{name: "flush delay", depts: []string{"finance", "", "eu.sales"}, n: 400, cfg: Config{FlushDelay: 500 * time.Microsecond}},
		{name: "flush delay, trickle", depts: []string{"ops", "hr"}, n: 200, gap: 50 * time.Microsecond, cfg: Config{FlushDelay: time.Millisecond}},
		{name: "flush delay, small batches and window", depts: []string{"ops"}, n: 300, gap: 10 * time.Microsecond,
			cfg: Config{FlushDelay: time.Millisecond, BatchSize: 7, MaxPending: 5}},
		{name: "byte cap", depts: []string{"finance", "ops"}, n: 300, cfg: Config{FlushDelay: time.Millisecond, BatchBytes: 1024}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t)
			var got acks
			cfg := tt.cfg
			cfg.SpoolDir, cfg.OnAck = t.TempDir(), got.onAck
			_, js := connect(t, srv, cfg)
			p := startPublisher(t, js, cfg)
			var want []*usagev1.UsageEvent
			for i := range tt.n {
				ev := newEvent(t, tt.depts[i%len(tt.depts)], i)
				want = append(want, ev)
				if err := p.Enqueue(handOver(ev)); err != nil {
					t.Fatalf("enqueue: %v", err)
				}
				if tt.gap > 0 {
					time.Sleep(tt.gap)
				}
			}
			testkit.Wait(t, 10*time.Second, "all published", func() bool { return p.Stats().Published == int64(tt.n) })
			closePublisher(t, p)
			msgs := streamMessages(t, js)
			checkOnce(t, msgs, want)
			got.check(t, msgs)
			checkSeqs(t, msgs, p.ProducerID())
			st := p.Stats()
			if st.Queued != int64(tt.n) || st.Spooled != 0 || st.Failed != 0 || st.Dropped != 0 || st.Pending != 0 || st.QueueLen != 0 {
				t.Errorf("stats %+v", st)
			}
			batches := len(streamBatches(t, js))
			if st.BatchesPublished != int64(batches) || st.LastSeq != uint64(batches) {
				t.Errorf("%d messages in the stream, stats %+v", batches, st)
			}
			limit, size := cmp.Or(cfg.BatchSize, DefaultBatchSize), cmp.Or(cfg.BatchBytes, DefaultBatchBytes)
			for _, m := range msgs {
				if m.batchLen > limit || m.batchLen > 1 && m.size > size {
					t.Fatalf("stream seq %d: %d events in %d bytes, limits %d and %d", m.seq, m.batchLen, m.size, limit, size)
				}
			}
		})
	}
}

// TestOutage stops NATS mid-run: events go to the spool, and once the
// server is back (same port and store) they are drained in order, each
// stored exactly once.
func TestOutage(t *testing.T) {
	tests := []struct {
		name          string
		before, while int
		cfg           Config
	}{
		{name: "short", before: 50, while: 200},
		{name: "spool spans segments", before: 20, while: 600, cfg: Config{SpoolMaxBytes: 256 << 10, BatchSize: 64}},
		{name: "flush delay", before: 50, while: 200, cfg: Config{FlushDelay: time.Millisecond, BatchSize: 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t)
			var got acks
			cfg := tt.cfg
			cfg.SpoolDir, cfg.OnAck = t.TempDir(), got.onAck
			nc, js := connect(t, srv, cfg)
			p := startPublisher(t, js, cfg)
			var want []*usagev1.UsageEvent
			enqueue := func(n int) {
				for range n {
					ev := newEvent(t, "finance", len(want))
					want = append(want, ev)
					if err := p.Enqueue(handOver(ev)); err != nil {
						t.Fatalf("enqueue: %v", err)
					}
				}
			}
			enqueue(tt.before)
			testkit.Wait(t, 10*time.Second, "published before the outage", func() bool { return p.Stats().Published == int64(tt.before) })

			srv.shutdown()
			testkit.Wait(t, 10*time.Second, "client to see the outage", func() bool { return !nc.IsConnected() })
			enqueue(tt.while)
			testkit.Wait(t, 10*time.Second, "events spooled", func() bool {
				st := p.Stats()
				return st.Spooled == int64(tt.while) && st.QueueLen == 0
			})
			if st := p.Stats(); st.SpoolBytes == 0 || st.Published != int64(tt.before) {
				t.Fatalf("during the outage: %+v", st)
			}

			srv.restart()
			testkit.Wait(t, 10*time.Second, "spool drained", func() bool { return p.Stats().Drained == int64(tt.while) })
			testkit.Wait(t, 10*time.Second, "spool empty", func() bool { return p.Stats().SpoolBytes == 0 })
			// Publishing from memory resumes once the spool is empty.
			enqueue(10)
			testkit.Wait(t, 10*time.Second, "published after the outage", func() bool {
				return p.Stats().Published == int64(tt.before+10)
			})
			closePublisher(t, p)

			msgs := streamMessages(t, js)
			checkOnce(t, msgs, want)
			got.check(t, msgs)
			for i, m := range msgs {
				if i < len(want) && m.ev.GetEventId() != want[i].GetEventId() {
					t.Fatalf("stream position %d holds %s (%s), want %s (%s): order lost",
						i, m.ev.GetEventId(), m.ev.GetRequestId(), want[i].GetEventId(), want[i].GetRequestId())
				}
			}
			if st := p.Stats(); st.Dropped != 0 || st.Corrupt != 0 || st.Torn != 0 {
				t.Errorf("stats %+v", st)
			}
			if segs := spoolFiles(t, cfg.SpoolDir, segExt); len(segs) != 1 {
				t.Errorf("segments after drain %v, want one", segs)
			}
		})
	}
}

// TestFlushDelay checks when Run holds an event for FlushDelay: not after
// a quiet spell, not beyond BatchSize events, not beyond the first event
// that ends FlushDelay after the batch's first, and else until the wait of
// twice FlushDelay ends. The publisher's clock is a test clock that moves
// only when the test moves it, and FlushDelay is an hour: an event that
// was wrongly held would not be published before waitFor gives up, and no
// assertion depends on how fast the machine runs.
func TestFlushDelay(t *testing.T) {
	t.Run("held", func(t *testing.T) {
		const delay = time.Hour
		clock := newTestClock()
		srv := startServer(t)
		var got acks
		cfg := Config{SpoolDir: t.TempDir(), OnAck: got.onAck, FlushDelay: delay, BatchSize: 4, Clock: clock.now}
		_, js := connect(t, srv, cfg)
		p := startPublisher(t, js, cfg)
		var want []*usagev1.UsageEvent
		enqueue := func(n int) {
			for range n {
				ev := newEvent(t, "ops", len(want))
				ev.Timestamp = clock.now().UnixNano()
				want = append(want, ev)
				if err := p.Enqueue(handOver(ev)); err != nil {
					t.Fatalf("enqueue: %v", err)
				}
			}
		}
		published := func(n int) {
			testkit.Wait(t, 10*time.Second, fmt.Sprintf("%d published", n), func() bool { return p.Stats().Published == int64(n) })
		}
		holding := func(published int64) {
			testkit.Wait(t, 10*time.Second, "a batch held open", func() bool { return p.gatherUntil.Load() != math.MaxInt64 })
			if n := p.Stats().Published; n != published {
				t.Fatalf("%d published while a batch is held, want %d", n, published)
			}
		}

		enqueue(1) // after a quiet spell: published at once, not held an hour
		published(1)
		enqueue(1) // soon after another: held
		holding(1)
		enqueue(3) // fills the batch of 4: no need to wait any longer
		published(5)

		// Held, until an event comes that ended FlushDelay after the batch's
		// first was taken: that one takes the batch out, no timer needed.
		enqueue(1)
		holding(5)
		late := newEvent(t, "ops", len(want))
		late.Timestamp = clock.now().Add(delay).UnixNano()
		late.LatencyTotalUs = 100_000 // it ended 100 ms after its timestamp
		want = append(want, late)
		if err := p.Enqueue(handOver(late)); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		published(7)

		clock.advance(2 * delay) // a quiet spell: the next event is not held
		enqueue(1)
		published(8)
		closePublisher(t, p)
		msgs := streamMessages(t, js)
		checkOnce(t, msgs, want)
		got.check(t, msgs)
	})
	// With no event after it, a held batch goes when its wait ends.
	t.Run("wait ends", func(t *testing.T) {
		clock := newTestClock()
		srv := startServer(t)
		cfg := Config{SpoolDir: t.TempDir(), FlushDelay: 10 * time.Millisecond, BatchSize: 4, Clock: clock.now}
		_, js := connect(t, srv, cfg)
		p := startPublisher(t, js, cfg)
		var want []*usagev1.UsageEvent
		for i := range 2 {
			ev := newEvent(t, "ops", i)
			ev.Timestamp = clock.now().UnixNano() // it ends before the wait does
			want = append(want, ev)
			if err := p.Enqueue(handOver(ev)); err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			if i == 0 {
				testkit.Wait(t, 10*time.Second, "1 published", func() bool { return p.Stats().Published == 1 })
			}
		}
		testkit.Wait(t, 10*time.Second, "the held event published", func() bool { return p.Stats().Published == 2 })
		closePublisher(t, p)
		checkOnce(t, streamMessages(t, js), want)
	})
}

// testClock is a clock that moves only when advanced.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestCloseFlushes(t *testing.T) {
	tests := []struct {
		name     string
		run      bool
		natsDown bool
		cfg      Config
	}{
		{name: "running, nats up", run: true},
		{name: "never run, nats up"},
		{name: "running, nats down", run: true, natsDown: true},
		{name: "never run, nats down", natsDown: true},
		{name: "running, nats up, flush delay", run: true, cfg: Config{FlushDelay: time.Millisecond}},
		{name: "running, nats down, flush delay", run: true, natsDown: true, cfg: Config{FlushDelay: time.Millisecond}},
	}
	const n = 500
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t)
			cfg := tt.cfg
			cfg.SpoolDir = t.TempDir()
			nc, js := connect(t, srv, cfg)
			if tt.natsDown {
				srv.shutdown()
				testkit.Wait(t, 10*time.Second, "client to see the outage", func() bool { return !nc.IsConnected() })
			}
			p, err := NewPublisher(js, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			runErr := make(chan error, 1)
			if tt.run {
				go func() { runErr <- p.Run(context.Background()) }()
			}
			var want []*usagev1.UsageEvent
			for i := range n {
				ev := newEvent(t, "ops", i)
				want = append(want, ev)
				if err := p.Enqueue(handOver(ev)); err != nil {
					t.Fatalf("enqueue: %v", err)
				}
			}
			closePublisher(t, p)
			if tt.run {
				if err := <-runErr; err != nil {
					t.Fatalf("run: %v", err)
				}
			}
			if err := p.Enqueue(newEvent(t, "ops", n)); !errors.Is(err, ErrClosed) {
				t.Errorf("enqueue after close: %v, want ErrClosed", err)
			}
			st := p.Stats()
			if st.QueueLen != 0 || st.Pending != 0 || st.Published+st.Spooled != n {
				t.Fatalf("after close: %+v", st)
			}
			if !tt.natsDown {
				checkOnce(t, streamMessages(t, js), want)
				return
			}
			if st.Spooled != n {
				t.Fatalf("spooled %d of %d with nats down", st.Spooled, n)
			}
			// The next process finds the events in the spool.
			srv.restart()
			p2 := startPublisher(t, js, cfg)
			testkit.Wait(t, 10*time.Second, "spool drained by the next publisher", func() bool { return p2.Stats().Drained == n })
			closePublisher(t, p2)
			checkOnce(t, streamMessages(t, js), want)
		})
	}
}

func TestRunAfterClose(t *testing.T) {
	srv := startServer(t)
	cfg := Config{SpoolDir: t.TempDir()}
	_, js := connect(t, srv, cfg)
	p, err := NewPublisher(js, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	closePublisher(t, p)
	// Close may win the race with the goroutine starting Run.
	if err := p.Run(context.Background()); err != nil {
		t.Errorf("run after close: %v, want nil", err)
	}
	closePublisher(t, p) // a second Close is harmless
}

func TestRunStopsOnCancel(t *testing.T) {
	srv := startServer(t)
	cfg := Config{SpoolDir: t.TempDir()}
	nc, js := connect(t, srv, cfg)
	srv.shutdown()
	testkit.Wait(t, 10*time.Second, "client to see the outage", func() bool { return !nc.IsConnected() })
	p, err := NewPublisher(js, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := p.Enqueue(newEvent(t, "ops", i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop on cancel")
	}
	if st := p.Stats(); st.Spooled != 100 || st.QueueLen != 0 {
		t.Errorf("after cancel: %+v", st)
	}
	if err := p.Enqueue(newEvent(t, "ops", 0)); !errors.Is(err, ErrClosed) {
		t.Errorf("enqueue after stop: %v, want ErrClosed", err)
	}
	closePublisher(t, p)
}

// TestFull fills queue and spool while NATS is down: fail-closed refuses
// further events, fail-open drops and counts them; nothing accepted is lost
// once NATS is back.
func TestFull(t *testing.T) {
	tests := []struct {
		name       string
		failClosed bool
	}{
		{name: "fail closed", failClosed: true},
		{name: "fail open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t)
			cfg := Config{
				SpoolDir: t.TempDir(), Buffer: 4, BatchSize: 2, MaxPending: 8,
				SpoolMaxBytes: 1024, FailClosed: tt.failClosed,
			}
			nc, js := connect(t, srv, cfg)
			srv.shutdown()
			testkit.Wait(t, 10*time.Second, "client to see the outage", func() bool { return !nc.IsConnected() })
			p := startPublisher(t, js, cfg)

			var accepted []*usagev1.UsageEvent
			var refused int
			for i := 0; i < 5000 && refused == 0 && p.Stats().Dropped == 0; i++ {
				ev := newEvent(t, "ops", i)
				switch err := p.Enqueue(handOver(ev)); {
				case errors.Is(err, ErrFull):
					refused++
				case err != nil:
					t.Fatalf("enqueue: %v", err)
				default:
					accepted = append(accepted, ev)
				}
				time.Sleep(200 * time.Microsecond)
			}
			st := p.Stats()
			if tt.failClosed && (refused == 0 || st.Dropped != 0) {
				t.Fatalf("fail closed: refused %d, stats %+v", refused, st)
			}
			if !tt.failClosed && (refused != 0 || st.Dropped == 0) {
				t.Fatalf("fail open: refused %d, stats %+v", refused, st)
			}
			if st.Spooled == 0 || st.SpoolBytes > cfg.SpoolMaxBytes {
				t.Fatalf("spool not filled or over its limit: %+v", st)
			}

			srv.restart()
			// Queued counts the events Enqueue kept (not those it dropped).
			testkit.Wait(t, 10*time.Second, "accepted events delivered", func() bool {
				st := p.Stats()
				return st.Published+st.Drained == st.Queued && st.SpoolBytes == 0
			})
			closePublisher(t, p)
			msgs := streamMessages(t, js)
			if tt.failClosed {
				checkOnce(t, msgs, accepted)
				return
			}
			// Fail-open: the dropped events are the only ones missing.
			if int64(len(msgs)) != int64(len(accepted))-p.Stats().Dropped {
				t.Errorf("stream holds %d, accepted %d, dropped %d", len(msgs), len(accepted), p.Stats().Dropped)
			}
		})
	}
}

func TestConcurrentEnqueue(t *testing.T) {
	srv := startServer(t)
	var got acks
	cfg := Config{SpoolDir: t.TempDir(), OnAck: got.onAck, Buffer: 1024}
	_, js := connect(t, srv, cfg)
	p := startPublisher(t, js, cfg)
	const workers, each = 8, 250
	evs := make([][]*usagev1.UsageEvent, workers)
	for w := range evs {
		for i := range each {
			evs[w] = append(evs[w], newEvent(t, fmt.Sprintf("dept%d", w%3), i))
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for _, ev := range evs[w] {
				if err := p.Enqueue(handOver(ev)); err != nil {
					t.Errorf("enqueue: %v", err)
					return
				}
				_ = p.Stats()
			}
		})
	}
	wg.Wait()
	testkit.Wait(t, 10*time.Second, "all delivered", func() bool {
		st := p.Stats()
		return st.Published+st.Drained == workers*each
	})
	closePublisher(t, p)
	msgs := streamMessages(t, js)
	checkOnce(t, msgs, slices.Concat(evs...))
	got.check(t, msgs)
}

// TestSpoolRepairedOnStart damages a spool left by an earlier process: the
// publisher moves the damage aside and publishes every intact event.
func TestSpoolRepairedOnStart(t *testing.T) {
	tests := []struct {
		name        string
		damage      func(t *testing.T, path string, recLens []int64)
		lost        []int // indexes of the events that cannot survive
		torn, crrpt int64
	}{
		{
			name: "torn final record",
			damage: func(t *testing.T, path string, recLens []int64) {
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				truncate(t, path, fi.Size()-recLens[len(recLens)-1]/2)
			},
			lost: []int{9}, torn: 1,
		},
		{
			name: "corrupt record",
			damage: func(t *testing.T, path string, recLens []int64) {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				off := recLens[0] + recLens[1] + recLens[2] + recHeader + 5 // inside record 3's payload
				b[off] ^= 0xff
				if err := os.WriteFile(path, b, 0o640); err != nil {
					t.Fatal(err)
				}
			},
			lost: []int{3}, crrpt: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := openSpool(dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			var all []*usagev1.UsageEvent
			var lens []int64
			for i := range 10 {
				ev := newEvent(t, "ops", i)
				b, err := proto.Marshal(ev)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.append(b); err != nil {
					t.Fatal(err)
				}
				all = append(all, ev)
				lens = append(lens, int64(recHeader+len(b)))
			}
			if err := s.close(); err != nil {
				t.Fatal(err)
			}
			tt.damage(t, s.segPath(s.segs[0].id), lens)

			srv := startServer(t)
			cfg := Config{SpoolDir: dir}
			_, js := connect(t, srv, cfg)
			p := startPublisher(t, js, cfg)
			want := slices.Clone(all)
			for _, i := range slices.Backward(tt.lost) {
				want = slices.Delete(want, i, i+1)
			}
			testkit.Wait(t, 10*time.Second, "intact events drained", func() bool { return p.Stats().Drained == int64(len(want)) })
			closePublisher(t, p)
			checkOnce(t, streamMessages(t, js), want)
			if st := p.Stats(); st.Torn != tt.torn || st.Corrupt != tt.crrpt {
				t.Errorf("torn %d corrupt %d, want %d %d", st.Torn, st.Corrupt, tt.torn, tt.crrpt)
			}
			if bad := spoolFiles(t, dir, badExt); len(bad) != 1 {
				t.Errorf(".bad files %v, want 1", bad)
			}
		})
	}
}

func TestRunTwice(t *testing.T) {
	srv := startServer(t)
	cfg := Config{SpoolDir: t.TempDir()}
	_, js := connect(t, srv, cfg)
	p := startPublisher(t, js, cfg)
	testkit.Wait(t, 10*time.Second, "run to start", func() bool {
		p.life.Lock()
		defer p.life.Unlock()
		return p.state == stateRunning
	})
	if err := p.Run(context.Background()); err == nil {
		t.Error("a second concurrent Run returned nil")
	}
}

// TestAckTimeoutSpools publishes into a subject nobody acks: each publish
// times out and its event goes to the spool, to be drained once the
// stream exists.
func TestAckTimeoutSpools(t *testing.T) {
	srv := startServer(t)
	cfg := Config{SpoolDir: t.TempDir(), AckTimeout: 200 * time.Millisecond}
	nc, js := connect(t, srv, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	// A plain subscriber swallows the messages, so there is no "no
	// responders" answer either: the acks just never come.
	hole, err := nc.Subscribe(SubjectPrefix+">", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	p := startPublisher(t, js, cfg)
	var want []*usagev1.UsageEvent
	for i := range 20 {
		ev := newEvent(t, "ops", i)
		want = append(want, ev)
		if err := p.Enqueue(handOver(ev)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Wait(t, 10*time.Second, "timed-out events spooled", func() bool { return p.Stats().Spooled == 20 })
	if st := p.Stats(); st.Failed < 20 || st.Published != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := hole.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStream(ctx, js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 10*time.Second, "spool drained", func() bool { return p.Stats().Drained == 20 })
	closePublisher(t, p)
	checkOnce(t, streamMessages(t, js), want)
}

// TestOverflow fills the queue of a publisher that is not running: the
// overflow list takes Buffer more events, then Enqueue refuses; Close
// publishes everything accepted.
func TestOverflow(t *testing.T) {
	tests := []struct {
		name       string
		failClosed bool
		wantErr    error
		dropped    int64
	}{
		{name: "fail closed", failClosed: true, wantErr: ErrFull},
		{name: "fail open", dropped: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t)
			cfg := Config{SpoolDir: t.TempDir(), Buffer: 3, FailClosed: tt.failClosed}
			_, js := connect(t, srv, cfg)
			p, err := NewPublisher(js, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			var want []*usagev1.UsageEvent
			for i := range 6 {
				ev := newEvent(t, "ops", i)
				want = append(want, ev)
				if err := p.Enqueue(handOver(ev)); err != nil {
					t.Fatalf("enqueue %d: %v", i, err)
				}
			}
			if st := p.Stats(); st.QueueLen != 6 || st.Queued != 6 {
				t.Fatalf("stats %+v, want 6 queued", st)
			}
			if err := p.Enqueue(newEvent(t, "ops", 6)); !errors.Is(err, tt.wantErr) {
				t.Fatalf("enqueue past the overflow: %v, want %v", err, tt.wantErr)
			}
			closePublisher(t, p)
			st := p.Stats()
			if st.Dropped != tt.dropped {
				t.Errorf("dropped %d, want %d", st.Dropped, tt.dropped)
			}
			// The overflow goes to the spool, so the queue follows it there
			// to keep the order.
			if st.Published != 0 || st.Spooled != 6 {
				t.Errorf("stats %+v, want 6 spooled", st)
			}
			p2 := startPublisher(t, js, cfg)
			testkit.Wait(t, 10*time.Second, "spool drained", func() bool { return p2.Stats().Drained == 6 })
			closePublisher(t, p2)
			checkOnce(t, streamMessages(t, js), want)
		})
	}
}

// TestIdlePublisherSleeps: once its events are acknowledged and on disk, a
// publisher's loop waits for the next event without waking on its tick.
func TestIdlePublisherSleeps(t *testing.T) {
	srv := startServer(t)
	var got acks
	var reads atomic.Int64 // the loop reads the clock on every wake
	cfg := Config{OnAck: got.onAck, SyncInterval: 10 * time.Millisecond,
		Clock: func() time.Time { reads.Add(1); return time.Now() }}
	cfg.SpoolDir = t.TempDir()
	_, js := connect(t, srv, cfg)
	p := startPublisher(t, js, cfg)
	for i := range 3 {
		if err := p.Enqueue(handOver(newEvent(t, "ops", i))); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Wait(t, 10*time.Second, "3 acks", func() bool { return got.count() == 3 })
	time.Sleep(100 * time.Millisecond) // the last ack settled
	before := reads.Load()
	time.Sleep(300 * time.Millisecond) // 30 ticks of 10 ms
	if n := reads.Load() - before; n > 0 {
		t.Errorf("the idle loop read the clock %d times in 300 ms, want 0 (no tick while nothing is due)", n)
	}
	if err := p.Enqueue(handOver(newEvent(t, "ops", 3))); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 10*time.Second, "the next event's ack", func() bool { return got.count() == 4 })
}
