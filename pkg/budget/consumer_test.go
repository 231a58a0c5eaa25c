package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// knownEvents straddle a day and a month boundary in UTC and need escaping.
var knownEvents = []ev{
	{at: utc(2026, 11, 30, 23, 59, 59), key: "k1", subject: "alice", team: "ml", dept: "eng", project: "p1", costNano: 1_500_000_000, prompt: 10, completion: 5},
	{at: utc(2026, 12, 1, 0, 0, 1), key: "k1", subject: "alice", team: "ml", dept: "eng", project: "p1", costNano: 2_250_000_000, prompt: 20, completion: 7},
	{at: utc(2026, 12, 1, 12, 0, 0), key: "k2", subject: "bob", team: "ml", dept: "eng", costNano: 1, prompt: 1, completion: 1},
	{at: utc(2026, 11, 15, 8, 0, 0), key: "k.3/é", subject: "carol", dept: "finance", project: "p1", costNano: 10_000_000_000, prompt: 100},
	{at: utc(2026, 12, 1, 23, 59, 59).Add(999_999_999), key: "k2", subject: "bob", team: "ml", dept: "eng", costNano: 3_000_000_000},
}

// wantTotal is one expected total: cost in nano-USD and request count.
type wantTotal struct {
	scope         Scope
	value         string
	period        Period
	start         string // period_start as stored
	cost          int64
	reqs          uint64
	absent        bool
	prompt, compl uint64
}

var knownWant = []wantTotal{
	{scope: ScopeDept, value: "eng", period: PeriodMonth, start: "2026-11", cost: 1_500_000_000, reqs: 1},
	{scope: ScopeDept, value: "eng", period: PeriodMonth, start: "2026-12", cost: 5_250_000_001, reqs: 3},
	{scope: ScopeDept, value: "eng", period: PeriodDay, start: "2026-11-30", cost: 1_500_000_000, reqs: 1},
	{scope: ScopeDept, value: "eng", period: PeriodDay, start: "2026-12-01", cost: 5_250_000_001, reqs: 3},
	{scope: ScopeDept, value: "eng", period: PeriodDay, start: "2026-12-02", absent: true},
	{scope: ScopeDept, value: "eng", period: PeriodTotal, cost: 6_750_000_001, reqs: 4},
	{scope: ScopeDept, value: "finance", period: PeriodTotal, cost: 10_000_000_000, reqs: 1},
	{scope: ScopeTeam, value: "eng/ml", period: PeriodDay, start: "2026-12-01", cost: 5_250_000_001, reqs: 3},
	{scope: ScopeTeam, value: "ml", period: PeriodDay, start: "2026-12-01", absent: true}, // no flat total
	// Project p1 of eng and project p1 of finance are two totals.
	{scope: ScopeProject, value: "eng/p1", period: PeriodMonth, start: "2026-11", cost: 1_500_000_000, reqs: 1},
	{scope: ScopeProject, value: "finance/p1", period: PeriodMonth, start: "2026-11", cost: 10_000_000_000, reqs: 1},
	{scope: ScopeProject, value: "eng/p1", period: PeriodTotal, cost: 3_750_000_000, reqs: 2},
	{scope: ScopeProject, value: "finance/p1", period: PeriodTotal, cost: 10_000_000_000, reqs: 1},
	{scope: ScopeProject, value: "p1", period: PeriodTotal, absent: true},
	{scope: ScopeKey, value: "k.3/é", period: PeriodTotal, cost: 10_000_000_000, reqs: 1},
	{scope: ScopeKey, value: "k2", period: PeriodDay, start: "2026-12-01", cost: 3_000_000_001, reqs: 2},
	{scope: ScopeSubject, value: "alice", period: PeriodDay, start: "2026-11-30", cost: 1_500_000_000, reqs: 1},
	{scope: ScopeGlobal, period: PeriodMonth, start: "2026-11", cost: 11_500_000_000, reqs: 2},
	{scope: ScopeGlobal, period: PeriodTotal, cost: 16_750_000_001, reqs: 5, prompt: 131, compl: 13},
}

// bulkEvents are many events over a few values, for concurrency.
func bulkEvents(n int) []ev {
	out := make([]ev, n)
	base := utc(2026, 12, 31, 23, 0, 0)
	for i := range out {
		out[i] = ev{
			at:       base.Add(time.Duration(i) * 7 * time.Second), // crosses into 2027
			key:      fmt.Sprintf("key%d", i%7),
			subject:  fmt.Sprintf("user%d", i%5),
			team:     fmt.Sprintf("team%d", i%3),
			dept:     fmt.Sprintf("dept%d", i%2),
			costNano: int64(1000 + i),
			prompt:   uint64(i),
		}
	}
	return out
}

// expected computes every total of evs independently of the consumer.
func expected(evs []ev) map[string]wantTotal {
	out := map[string]wantTotal{}
	for _, e := range evs {
		vals := map[Scope]string{ScopeGlobal: "", ScopeDept: e.dept, ScopeSubject: e.subject, ScopeKey: e.key}
		if e.team != "" {
			vals[ScopeTeam] = e.dept + "/" + e.team // test departments hold no "%", "/" or "*"
		}
		if e.project != "" {
			vals[ScopeProject] = e.dept + "/" + e.project
		}
		u := e.at.UTC()
		for sc, v := range vals {
			if sc != ScopeGlobal && v == "" {
				continue
			}
			for _, p := range []struct {
				p     Period
				start string
			}{{PeriodDay, u.Format("2006-01-02")}, {PeriodMonth, u.Format("2006-01")}, {PeriodTotal, ""}} {
				id := TotalID{Scope: sc, Value: v, Period: p.p}
				var err error
				if p.p != PeriodTotal {
					if id.Start, err = parseStart(p.p, p.start); err != nil {
						panic(err)
					}
				}
				w := out[id.Key()]
				w.scope, w.value, w.period, w.start = sc, v, p.p, p.start
				w.cost += e.costNano
				w.reqs++
				w.prompt += e.prompt
				w.compl += e.completion
				out[id.Key()] = w
			}
		}
	}
	return out
}

func (e *env) checkTotals(t *testing.T, want []wantTotal) {
	t.Helper()
	for _, w := range want {
		id := TotalID{Scope: w.scope, Value: w.value, Period: w.period}
		if w.period != PeriodTotal {
			var err error
			if id.Start, err = parseStart(w.period, w.start); err != nil {
				t.Fatal(err)
			}
		}
		st := e.total(t, id)
		if w.absent {
			if st != nil {
				t.Errorf("%s: got a total, want none", id.Key())
			}
			continue
		}
		if st == nil {
			t.Errorf("%s: missing", id.Key())
			continue
		}
		if st.CostNanoUsd != w.cost || st.Requests != w.reqs {
			t.Errorf("%s: cost %d, requests %d; want %d, %d", id.Key(), st.CostNanoUsd, st.Requests, w.cost, w.reqs)
		}
		if (w.prompt != 0 || w.compl != 0) && (st.PromptTokens != w.prompt || st.CompletionTokens != w.compl) {
			t.Errorf("%s: tokens %d/%d, want %d/%d", id.Key(), st.PromptTokens, st.CompletionTokens, w.prompt, w.compl)
		}
		if st.Scope != w.scope.String() || st.Value != w.value || st.Period != w.period.String() || st.PeriodStart != w.start {
			t.Errorf("%s: stored as %q %q %q %q", id.Key(), st.Scope, st.Value, st.Period, st.PeriodStart)
		}
	}
}

func (e *env) checkAll(t *testing.T, evs []ev) {
	t.Helper()
	want := expected(evs)
	list := make([]wantTotal, 0, len(want))
	for _, w := range want {
		list = append(list, w)
	}
	e.checkTotals(t, list)
	keys, err := e.kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range keys.Keys() {
		n++
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected total %s", k)
		}
	}
	if n != len(want) {
		t.Errorf("bucket holds %d totals, want %d", n, len(want))
	}
}

func TestConsumerTotals(t *testing.T) {
	e := startEnv(t)
	seq := e.publish(t, knownEvents...)
	stop := run(t, newConsumer(t, e.js, ConsumerOptions{Batch: 2}))
	e.waitApplied(t, seq)
	e.waitConsumed(t, Durable)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.checkTotals(t, knownWant)
	e.checkAll(t, knownEvents)
}

// TestConsumerQualifiesTeams: two events of team ml, one of research and
// one of finance, make two team totals, never one shared.
func TestConsumerQualifiesTeams(t *testing.T) {
	e := startEnv(t)
	at := utc(2026, 12, 1, 12, 0, 0)
	evs := []ev{
		{at: at, key: "k1", subject: "alice", dept: "research", team: "ml", project: "p", costNano: 7},
		{at: at, key: "k2", subject: "bob", dept: "finance", team: "ml", project: "p", costNano: 11},
		{at: at, key: "k3", subject: "carol", team: "ml", costNano: 13},           // no dept
		{at: at, key: "k4", subject: "dan", dept: "a/b", team: "c", costNano: 17}, // "/" in a dept
	}
	seq := e.publish(t, evs...)
	stop := run(t, newConsumer(t, e.js, ConsumerOptions{}))
	e.waitApplied(t, seq)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.checkTotals(t, []wantTotal{
		{scope: ScopeTeam, value: "research/ml", period: PeriodTotal, cost: 7, reqs: 1},
		{scope: ScopeTeam, value: "finance/ml", period: PeriodTotal, cost: 11, reqs: 1},
		{scope: ScopeTeam, value: "/ml", period: PeriodTotal, cost: 13, reqs: 1},
		{scope: ScopeTeam, value: "a%2Fb/c", period: PeriodTotal, cost: 17, reqs: 1},
		{scope: ScopeTeam, value: "ml", period: PeriodTotal, absent: true},
		{scope: ScopeProject, value: "research/p", period: PeriodMonth, start: "2026-12", cost: 7, reqs: 1},
		{scope: ScopeProject, value: "finance/p", period: PeriodMonth, start: "2026-12", cost: 11, reqs: 1},
		{scope: ScopeDept, value: "a/b", period: PeriodTotal, cost: 17, reqs: 1},
	})
}

func TestConsumerExactlyOnce(t *testing.T) {
	tests := []struct {
		name string
		// scenario publishes evs and runs consumers until they are applied.
		scenario func(t *testing.T, e *env, evs []ev)
	}{
		{
			name: "crash after writes before ack, then restart",
			scenario: func(t *testing.T, e *env, evs []ev) {
				e.publish(t, evs...)
				c := newConsumer(t, e.js, ConsumerOptions{Batch: 10})
				var n atomic.Int32
				c.beforeAck = func() error {
					if n.Add(1) == 3 {
						return errCrash
					}
					return nil
				}
				ctx := context.Background()
				if err := c.Run(ctx); !errors.Is(err, errCrash) {
					t.Fatalf("Run = %v, want the simulated crash", err)
				}
				// A new instance starts while the crashed batch awaits redelivery.
				run(t, newConsumer(t, e.js, ConsumerOptions{Batch: 10, AckWait: time.Second}))
			},
		},
		{
			name: "crash after the totals before the checkpoints, then restart",
			scenario: func(t *testing.T, e *env, evs []ev) {
				e.publish(t, evs...)
				c := newConsumer(t, e.js, ConsumerOptions{Batch: 10})
				var n atomic.Int32
				c.beforeCheckpoint = func() error {
					if n.Add(1) == 3 {
						return errCrash
					}
					return nil
				}
				if err := c.Run(context.Background()); !errors.Is(err, errCrash) {
					t.Fatalf("Run = %v, want the simulated crash", err)
				}
				run(t, newConsumer(t, e.js, ConsumerOptions{Batch: 10, AckWait: time.Second}))
			},
		},
		{
			name: "checkpoint not written, batch redelivered to the same instance",
			scenario: func(t *testing.T, e *env, evs []ev) {
				e.publish(t, evs...)
				c := newConsumer(t, e.js, ConsumerOptions{Batch: 10, NakDelay: 100 * time.Millisecond})
				var n atomic.Int32
				c.beforeCheckpoint = func() error {
					if k := n.Add(1); k == 2 || k == 3 {
						return errors.New("transient")
					}
					return nil
				}
				run(t, c)
			},
		},
		{
			name: "crash before the checkpoints while a second instance shares the durable",
			scenario: func(t *testing.T, e *env, evs []ev) {
				run(t, newConsumer(t, e.newJS(t), ConsumerOptions{Batch: 4, AckWait: time.Second}))
				a := newConsumer(t, e.js, ConsumerOptions{Batch: 6, AckWait: time.Second})
				var n atomic.Int32
				a.beforeCheckpoint = func() error {
					if n.Add(1) == 3 {
						return errCrash
					}
					return nil
				}
				done := make(chan error, 1)
				go func() { done <- a.Run(context.Background()) }()
				for i := 0; i < len(evs); i += 25 {
					e.publish(t, evs[i:min(i+25, len(evs))]...)
				}
				select {
				case err := <-done:
					if !errors.Is(err, errCrash) {
						t.Fatalf("Run = %v, want the simulated crash", err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("the crashing instance got fewer than 3 batches")
				}
				// A restarted instance joins the survivor.
				run(t, newConsumer(t, e.newJS(t), ConsumerOptions{Batch: 5, AckWait: time.Second}))
			},
		},
		{
			name: "failed batch is naked and redelivered",
			scenario: func(t *testing.T, e *env, evs []ev) {
				e.publish(t, evs...)
				c := newConsumer(t, e.js, ConsumerOptions{Batch: 10, NakDelay: 100 * time.Millisecond})
				var n atomic.Int32
				c.beforeAck = func() error {
					if k := n.Add(1); k == 2 || k == 5 {
						return errors.New("transient")
					}
					return nil
				}
				run(t, c)
			},
		},
		{
			name: "two instances share the durable",
			scenario: func(t *testing.T, e *env, evs []ev) {
				run(t, newConsumer(t, e.js, ConsumerOptions{Batch: 4}))
				run(t, newConsumer(t, e.newJS(t), ConsumerOptions{Batch: 4}))
				for i := 0; i < len(evs); i += 25 {
					e.publish(t, evs[i:min(i+25, len(evs))]...)
				}
			},
		},
		{
			name: "two durables race on every total",
			scenario: func(t *testing.T, e *env, evs []ev) {
				run(t, newConsumer(t, e.js, ConsumerOptions{Batch: 8}))
				run(t, newConsumer(t, e.newJS(t), ConsumerOptions{Batch: 5, Durable: "budget-b"}))
				for i := 0; i < len(evs); i += 25 {
					e.publish(t, evs[i:min(i+25, len(evs))]...)
				}
			},
		},
		{
			name: "replay with a fresh durable",
			scenario: func(t *testing.T, e *env, evs []ev) {
				seq := e.publish(t, evs...)
				stop := run(t, newConsumer(t, e.js, ConsumerOptions{}))
				e.waitApplied(t, seq)
				e.waitConsumed(t, Durable)
				_ = stop()
				// Several folds of 40 messages. Pull iterators of only a few
				// messages (PullMaxMessages 14) were seen to stall under -race
				// on a loaded machine, in the client, with messages pending.
				run(t, newConsumer(t, e.js, ConsumerOptions{Batch: 40, Durable: "budget-replay"}))
				e.waitConsumed(t, "budget-replay")
			},
		},
	}
	for _, tt := range tests {
		for _, batched := range []bool{false, true} {
			name := tt.name + "/legacy events"
			if batched {
				name = tt.name + "/batches, each stored twice"
			}
			t.Run(name, func(t *testing.T) {
				e := startEnv(t)
				e.batched = batched
				evs := append(append([]ev(nil), knownEvents...), bulkEvents(200)...)
				tt.scenario(t, e, evs)
				e.waitApplied(t, e.counted)
				e.waitConsumed(t, Durable)
				e.checkTotals(t, knownWant[:len(knownWant)-2]) // the global rows change with the bulk
				e.checkAll(t, evs)
			})
		}
	}
}

func TestConsumerPoison(t *testing.T) {
	e := startEnv(t)
	e.publish(t, knownEvents[:2]...)
	if _, err := e.js.Publish(context.Background(), "tollgate.usage.eng", []byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	seq := e.publish(t, knownEvents[2:]...)
	run(t, newConsumer(t, e.js, ConsumerOptions{}))
	e.waitApplied(t, seq)
	e.waitConsumed(t, Durable)
	e.checkAll(t, knownEvents)
}

// TestTakeKeepsNoMessageBytes: the consumer decodes a batch with its
// strings sharing the message's bytes, so what it keeps past the message
// (the producer id, the scope values) must be copies: scribbling over the
// message after take leaves them whole.
func TestTakeKeepsNoMessageBytes(t *testing.T) {
	e := startEnv(t)
	c := newConsumer(t, e.js, ConsumerOptions{})
	at := utc(2026, 12, 1, 12, 0, 0)
	b := &usagev1.UsageBatch{ProducerId: "gw-one", Seq: 1, Events: []*usagev1.UsageEvent{
		{EventId: "e1", Timestamp: at.UnixNano(), KeyId: "k1", Subject: "alice", Dept: "research", CostNanoUsd: 5},
		{EventId: "e2", Timestamp: at.UnixNano(), KeyId: "k1", Subject: "alice", Dept: "research", Team: "nlp", Project: "p", CostNanoUsd: 7},
	}}
	data, err := b.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.take(data, 1); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 'x'
	}
	if len(c.events) != 2 {
		t.Fatalf("%d events taken, want 2", len(c.events))
	}
	for i, ev := range c.events {
		if ev.vals[ScopeKey] != "k1" || ev.vals[ScopeSubject] != "alice" || ev.vals[ScopeDept] != "research" {
			t.Errorf("event %d: scope values %q after the message was overwritten", i, ev.vals)
		}
	}
	if _, ok := c.touched["gw-one"]; !ok {
		t.Errorf("producers touched %v after the message was overwritten, want gw-one", c.touched)
	}
}

// TestConsumerFoldInterval: events that come within FoldInterval of a
// fold's start wait for the next fold and go in it together, so each total
// is written once per interval; an event after a quiet spell is folded at
// once, not an interval later. collect runs in a synctest bubble on a
// source that hands out messages at set times, so the times it waits are
// exact and no assertion depends on how fast the machine runs.
func TestConsumerFoldInterval(t *testing.T) {
	const (
		interval = 2 * time.Second
		idleGap  = 10 * time.Millisecond
	)
	synctest.Test(t, func(t *testing.T) {
		c := &Consumer{o: ConsumerOptions{Batch: 100, MaxWait: 50 * time.Millisecond, IdleGap: idleGap, FoldInterval: interval}}
		src := &timedMessages{ch: make(chan jetstream.Msg)}
		ctx := t.Context()
		go func() {
			src.ch <- testMsg{} // the lone event, after a quiet spell
			time.Sleep(time.Second)
			for range 10 { // events 20 ms apart, twice IdleGap
				src.ch <- testMsg{}
				time.Sleep(2 * idleGap)
			}
		}()

		start := time.Now()
		msgs, err := c.collect(ctx, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || time.Since(start) != idleGap {
			t.Errorf("first fold: %d messages after %v, want the lone one after IdleGap (%v)", len(msgs), time.Since(start), idleGap)
		}
		firstFold := time.Now()
		msgs, err = c.collect(ctx, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 10 {
			t.Errorf("second fold: %d messages, want the ten that came within the interval", len(msgs))
		}
		if d := time.Since(firstFold); d < interval {
			t.Errorf("second fold started %v after the first, want at least FoldInterval (%v)", d, interval)
		}
	})
}

// TestConsumerLoneEvent: with a FoldInterval of an hour, a lone event on a
// real stream is still folded at once (waitApplied would give up first).
func TestConsumerLoneEvent(t *testing.T) {
	e := startEnv(t)
	c := newConsumer(t, e.js, ConsumerOptions{FoldInterval: time.Hour})
	run(t, c)
	x := ev{at: time.Now(), subject: "alice", dept: "d", costNano: 7}
	e.waitApplied(t, e.publish(t, x))
	// The fold writes its totals concurrently: the global one can be read
	// before the dept's write is stored.
	id := TotalID{Scope: ScopeDept, Value: "d", Period: PeriodTotal}
	testkit.Wait(t, 10*time.Second, "the condition", func() bool { return e.total(t, id) != nil })
	if st := e.total(t, id); st == nil || st.CostNanoUsd != 7 || st.Requests != 1 {
		t.Errorf("dept total %+v, want 1 request costing 7", st)
	}
}

// timedMessages is a message source for collect: the messages sent on ch.
type timedMessages struct{ ch chan jetstream.Msg }

func (s *timedMessages) next(ctx context.Context, wait time.Duration) (jetstream.Msg, error) {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case m := <-s.ch:
		return m, nil
	case <-timeout:
		return nil, nats.ErrTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// testMsg is a message collect only counts.
type testMsg struct{ jetstream.Msg }

// TestConsumerLag: tollgate_budget_consumer_lag_messages is the count of
// stream messages not yet delivered to the consumer (JetStream's pending
// count) as of its latest batch: five events waiting and batches of two,
// the first batch sees at least three behind it, and once all are folded
// the gauge reads 0 on the registry the consumer was given.
func TestConsumerLag(t *testing.T) {
	e := startEnv(t)
	var last uint64
	for i := range 5 {
		last = e.publish(t, ev{at: time.Now(), subject: "alice", dept: "d", costNano: int64(i + 1)})
	}
	reg := prometheus.NewRegistry()
	c := newConsumer(t, e.js, ConsumerOptions{Batch: 2, FoldInterval: -1, Registerer: reg})
	var mu sync.Mutex
	var seen []float64
	c.beforeAck = func() error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, metricValue(t, c.m.lag))
		return nil
	}
	run(t, c)
	e.waitApplied(t, last)
	e.waitAcked(t, Durable)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 3 || seen[0] < 3 || seen[len(seen)-1] != 0 {
		t.Errorf("lag at each batch %v, want at least 3 batches, the first with at least 3 behind it, the last with 0", seen)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, mf := range mfs {
		if mf.GetName() == "tollgate_budget_consumer_lag_messages" {
			found = true
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 0 {
				t.Errorf("lag gauge %v after everything was folded, want 0", v)
			}
		}
	}
	if !found {
		t.Error("tollgate_budget_consumer_lag_messages not registered")
	}
}
