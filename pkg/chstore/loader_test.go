package chstore

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/natstest"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

func TestLoad(t *testing.T) {
	tests := []struct {
		name          string
		events, batch int
	}{
		{name: "one partial batch", events: 7, batch: 1000},
		{name: "many batches", events: 3000, batch: 500},
		{name: "batches of one", events: 20, batch: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js, s := newJS(t), newStore(t, ch.Addr(t))
			last := publish(t, js, 0, tt.events)
			l, err := NewLoader(s, js, testOptions(tt.batch))
			if err != nil {
				t.Fatal(err)
			}
			r := start(l.Run)
			waitWatermark(t, s, last, r.done)
			waitFor(t, r.done, func() bool { return metricValue(l.m.lag) == 0 })
			if err := r.stop(t); err != nil {
				t.Fatalf("run: %v", err)
			}
			checkExact(t, s, expect(0, tt.events))
			for _, m := range []struct {
				name      string
				got, want float64
			}{
				{"rows", metricValue(l.m.rows), float64(tt.events)},
				{"watermark", metricValue(l.m.watermark), float64(last)},
				{"backoff", metricValue(l.m.backoff), 0},
			} {
				if m.got != m.want {
					t.Errorf("%s metric %v, want %v", m.name, m.got, m.want)
				}
			}
		})
	}
}

// eventRow is a usage_events row as the tests read it back.
type eventRow struct {
	EventID          string    `ch:"event_id"`
	RequestID        string    `ch:"request_id"`
	TS               time.Time `ch:"ts"`
	TSMs             uint64    `ch:"ts_ms"`
	Issuer           string    `ch:"issuer"`
	Subject          string    `ch:"subject"`
	KeyID            string    `ch:"key_id"`
	Dept             string    `ch:"dept"`
	Team             string    `ch:"team"`
	Project          string    `ch:"project"`
	RequestedModel   string    `ch:"requested_model"`
	ServedModel      string    `ch:"served_model"`
	Provider         string    `ch:"provider"`
	Deployment       string    `ch:"deployment"`
	Attempts         uint32    `ch:"attempts"`
	Fallbacks        []string  `ch:"fallbacks"`
	Route            string    `ch:"route"`
	PromptTokens     uint64    `ch:"prompt_tokens"`
	CompletionTokens uint64    `ch:"completion_tokens"`
	CachedTokens     uint64    `ch:"cached_tokens"`
	ReasoningTokens  uint64    `ch:"reasoning_tokens"`
	Estimated        uint8     `ch:"estimated"`
	CostNanoUSD      int64     `ch:"cost_nano_usd"`
	PricingVersion   string    `ch:"pricing_version"`
	Endpoint         string    `ch:"endpoint"`
	Stream           uint8     `ch:"stream"`
	StatusCode       uint32    `ch:"status_code"`
	ErrorType        string    `ch:"error_type"`
	ClientAborted    uint8     `ch:"client_aborted"`
	LatencyTotalUs   uint64    `ch:"latency_total_us"`
	TTFTUs           uint64    `ch:"ttft_us"`
	UpstreamUs       uint64    `ch:"upstream_us"`
	OverheadUs       uint64    `ch:"overhead_us"`
	CacheHit         uint8     `ch:"cache_hit"`
	DegradationStep  string    `ch:"degradation_step"`
	ClampedMaxTokens uint32    `ch:"clamped_max_tokens"`
	StreamSeq        uint64    `ch:"stream_seq"`
	IngestedAt       time.Time `ch:"ingested_at"`
	BudgetScope      []string  `ch:"budget_scope"`
	BudgetValue      []string  `ch:"budget_value"`
	BudgetPeriod     []string  `ch:"budget_period"`
	BudgetStart      []string  `ch:"budget_period_start"`
	BudgetFromToken  []uint8   `ch:"budget_from_token"`
	BudgetLimit      []int64   `ch:"budget_limit_nano_usd"`
	BudgetSpent      []int64   `ch:"budget_spent_nano_usd"`
	BudgetReserved   []int64   `ch:"budget_reserved_nano_usd"`
	BudgetHeadroom   []int64   `ch:"budget_headroom_nano_usd"`
	Hedged           uint8     `ch:"hedged"`
	Units            uint64    `ch:"units"`
	Unit             string    `ch:"unit"`
	ProducerID       string    `ch:"producer_id"`
	BatchSeq         uint64    `ch:"batch_seq"`
	CacheWriteTokens uint64    `ch:"cache_write_tokens"`
	ServiceTier      string    `ch:"service_tier"`
	Recovered        uint8     `ch:"recovered"`
}

func TestRowFields(t *testing.T) {
	js, s := newJS(t), newStore(t, ch.Addr(t))
	odd := testEvent(3)
	odd.Estimated, odd.ClientAborted, odd.CacheHit = true, true, true
	odd.ReasoningTokens, odd.DegradationStep, odd.ClampedMaxTokens = 11, "cheaper-model", 256
	odd.Timestamp = baseTS + 1_999_999 // sub-millisecond part is dropped
	odd.Hedged, odd.Units, odd.Unit = true, 3, "image"
	odd.CacheWriteTokens, odd.ServiceTier, odd.Recovered = 40, "flex", true
	odd.Budgets = []*usagev1.BudgetCheck{
		{Scope: "dept", Value: "eng", Period: "month", PeriodStart: "2026-11", LimitNanoUsd: 500e9, SpentNanoUsd: 212_300_000_000,
			ReservedNanoUsd: 40_000, HeadroomNanoUsd: 287_700_000_000},
		{Scope: "subject", Value: "user-3", Period: "total", FromToken: true, LimitNanoUsd: 5e9, SpentNanoUsd: 6e9,
			ReservedNanoUsd: 40_000, HeadroomNanoUsd: -1e9},
	}
	data, err := proto.Marshal(odd)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	publish(t, js, 0, 3)
	ack, err := js.Publish(ctx, "tollgate.usage.eng", data)
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions(100)
	ingested := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	opts.Now = func() time.Time { return ingested }
	loadUntil(t, s, js, opts, ack.Sequence)

	var rows []eventRow
	if err := s.conn.Select(ctx, &rows, "SELECT "+eventColumns+" FROM usage_events ORDER BY stream_seq"); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for i, row := range rows {
		ev := testEvent(i)
		if i == 3 {
			ev = odd
		}
		t.Run(ev.EventId, func(t *testing.T) {
			want := eventRow{
				EventID: ev.EventId, RequestID: ev.RequestId,
				TS:   time.Unix(0, ev.Timestamp).UTC().Truncate(time.Second),
				TSMs: uint64(ev.Timestamp / 1e6), Issuer: ev.Issuer, Subject: ev.Subject, KeyID: ev.KeyId,
				Dept: ev.Dept, Team: ev.Team, Project: ev.Project, RequestedModel: ev.RequestedModel,
				ServedModel: ev.ServedModel, Provider: ev.Provider, Deployment: ev.Deployment,
				Attempts: ev.Attempts, Fallbacks: ev.Fallbacks, Route: ev.Route,
				PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens,
				CachedTokens: ev.CachedTokens, ReasoningTokens: ev.ReasoningTokens,
				Estimated: flag(ev.Estimated), CostNanoUSD: ev.CostNanoUsd, PricingVersion: ev.PricingVersion,
				Endpoint: ev.Endpoint, Stream: flag(ev.Stream), StatusCode: ev.StatusCode, ErrorType: ev.ErrorType,
				ClientAborted: flag(ev.ClientAborted), LatencyTotalUs: ev.LatencyTotalUs, TTFTUs: ev.TtftUs,
				UpstreamUs: ev.UpstreamUs, OverheadUs: ev.OverheadUs, CacheHit: flag(ev.CacheHit),
				DegradationStep: ev.DegradationStep, ClampedMaxTokens: ev.ClampedMaxTokens,
				StreamSeq: uint64(i + 1), IngestedAt: ingested,
				BudgetScope: []string{}, BudgetValue: []string{}, BudgetPeriod: []string{}, BudgetStart: []string{},
				BudgetFromToken: []uint8{}, BudgetLimit: []int64{}, BudgetSpent: []int64{}, BudgetReserved: []int64{},
				BudgetHeadroom: []int64{},
				Hedged:         flag(ev.Hedged), Units: ev.Units, Unit: ev.Unit, CacheWriteTokens: ev.CacheWriteTokens,
				ServiceTier: ev.ServiceTier, Recovered: flag(ev.Recovered),
			}
			for _, b := range ev.Budgets {
				want.BudgetScope, want.BudgetValue = append(want.BudgetScope, b.Scope), append(want.BudgetValue, b.Value)
				want.BudgetPeriod, want.BudgetStart = append(want.BudgetPeriod, b.Period), append(want.BudgetStart, b.PeriodStart)
				want.BudgetFromToken = append(want.BudgetFromToken, flag(b.FromToken))
				want.BudgetLimit, want.BudgetSpent = append(want.BudgetLimit, b.LimitNanoUsd), append(want.BudgetSpent, b.SpentNanoUsd)
				want.BudgetReserved = append(want.BudgetReserved, b.ReservedNanoUsd)
				want.BudgetHeadroom = append(want.BudgetHeadroom, b.HeadroomNanoUsd)
			}
			if want.Fallbacks == nil {
				want.Fallbacks = []string{}
			}
			row.TS, row.IngestedAt = row.TS.UTC(), row.IngestedAt.UTC()
			if !rowEqual(row, want) {
				t.Fatalf("row\n %+v\nwant\n %+v", row, want)
			}
		})
	}
}

func rowEqual(a, b eventRow) bool {
	return reflect.DeepEqual(a, b)
}

// crashOn returns a hook that fails the n-th time it runs.
func crashOn(n int) func() error {
	var calls atomic.Int32
	return func() error {
		if int(calls.Add(1)) == n {
			return errCrash
		}
		return nil
	}
}

func TestExactlyOnceAcrossCrash(t *testing.T) {
	const events, batch = 2000, 500
	tests := []struct {
		name string
		// arm sets a hook on l; cancel cancels l's Run.
		arm     func(l *Loader, cancel func())
		wantErr error
		// rows stored and watermark (in batches) when the first Run ended;
		// with finished true, at least that many: the batches in hand
		// (the one being stored, and the next one, collected meanwhile) are
		// finished, and the watermark then covers exactly the rows stored.
		rows, wmBatches int
		finished        bool
		// verified is how many events the second Run must find stored by
		// looking them up (not by the watermark).
		verified int
	}{
		{name: "killed after insert, before watermark and ack",
			arm:     func(l *Loader, _ func()) { l.afterInsert = crashOn(2) },
			wantErr: errCrash, rows: 2 * batch, wmBatches: 1, verified: batch},
		{name: "killed after watermark, before ack",
			arm:     func(l *Loader, _ func()) { l.afterWatermark = crashOn(2) },
			wantErr: errCrash, rows: 2 * batch, wmBatches: 2},
		{name: "cancelled during insert: the batch is finished",
			arm: func(l *Loader, cancel func()) {
				crash := crashOn(2)
				l.afterInsert = func() error {
					if crash() != nil {
						cancel()
					}
					return nil
				}
			},
			rows: 2 * batch, wmBatches: 2, finished: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js, s := newJS(t), newStore(t, ch.Addr(t))
			last := publish(t, js, 0, events)

			// Every event is in the stream before the loader starts, so
			// each batch fills to its size; the interval only has to be
			// longer than fetching 500 messages takes under -race, or a
			// batch would be cut short and the counts below would move.
			// Each loader has its own metrics registry.
			opts := func() LoaderOptions {
				o := testOptions(batch)
				o.BatchInterval = 2 * time.Second
				return o
			}
			l1, err := NewLoader(s, js, opts())
			if err != nil {
				t.Fatal(err)
			}
			ctx1, cancel1 := context.WithCancel(context.Background())
			tt.arm(l1, cancel1)
			r1 := startCtx(ctx1, cancel1, l1.Run)
			select {
			case err := <-r1.done:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("first run: %v, want %v", err, tt.wantErr)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("first run did not end")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rows := readTotals(t, s).rows
			wm, err := s.Watermark(ctx, DefaultStream, DefaultDurable)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.finished && (rows < uint64(tt.rows) || wm != rows):
				t.Fatalf("after the first run: %d rows, watermark %d; want at least %d rows, all under the watermark", rows, wm, tt.rows)
			case !tt.finished && (rows != uint64(tt.rows) || wm != uint64(tt.wmBatches*batch)):
				t.Fatalf("after the first run: %d rows, watermark %d; want %d, %d", rows, wm, tt.rows, tt.wmBatches*batch)
			}

			l2 := loadUntil(t, s, js, opts(), last)
			checkExact(t, s, expect(0, events))
			if got := metricValue(l2.m.rows); got != float64(events-int(rows)) {
				t.Fatalf("second run inserted %v, want %d", got, events-int(rows))
			}
			if got := metricValue(l2.m.skippedStored); got != float64(tt.verified) {
				t.Fatalf("second run found %v stored, want %d", got, tt.verified)
			}
		})
	}
}

func TestWatermarkSkipsRedelivery(t *testing.T) {
	tests := []struct {
		name        string
		stored, all int
	}{
		{name: "everything stored", stored: 300, all: 300},
		{name: "stored prefix, new tail", stored: 300, all: 420},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js, s := newJS(t), newStore(t, ch.Addr(t))
			wm := publish(t, js, 0, tt.stored)
			loadUntil(t, s, js, testOptions(100), wm)
			last := wm
			if tt.all > tt.stored {
				last = publish(t, js, tt.stored, tt.all)
			}

			// Replay the stream from its start: every stored sequence is
			// delivered again, straight into the batch loop.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			l2, err := NewLoader(s, js, testOptions(100))
			if err != nil {
				t.Fatal(err)
			}
			if l2.stream, err = js.Stream(ctx, DefaultStream); err != nil {
				t.Fatal(err)
			}
			l2.wm = wm
			l2.cons, err = js.CreateConsumer(ctx, DefaultStream, jetstream.ConsumerConfig{
				Durable: "replay", AckPolicy: jetstream.AckAllPolicy, AckWait: time.Minute,
			})
			if err != nil {
				t.Fatal(err)
			}
			r2 := start(l2.loop)
			waitFor(t, r2.done, func() bool {
				info, err := l2.cons.Info(ctx)
				return err == nil && info.AckFloor.Stream == last
			})
			if err := r2.stop(t); err != nil {
				t.Fatal(err)
			}
			checkExact(t, s, expect(0, tt.all))
			if got := metricValue(l2.m.skippedStored); got != float64(tt.stored) {
				t.Fatalf("skipped %v as stored, want %d", got, tt.stored)
			}
			if got := metricValue(l2.m.rows); got != float64(tt.all-tt.stored) {
				t.Fatalf("inserted %v, want %d", got, tt.all-tt.stored)
			}
		})
	}
}

// waitFor polls cond until it holds, failing t after 20s or when done
// delivers.
func waitFor(t testing.TB, done <-chan error, cond func() bool) {
	t.Helper()
	testkit.Wait(t, 20*time.Second, "the condition", func() bool {
		select {
		case err := <-done:
			t.Fatalf("loader stopped early: %v", err)
		default:
		}
		return cond()
	})
}

func TestDeliveryGapRewinds(t *testing.T) {
	js, s := newJS(t), newStore(t, ch.Addr(t))
	wm := publish(t, js, 0, 100)
	loadUntil(t, s, js, testOptions(50), wm)
	last := publish(t, js, 100, 300)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, DefaultStream, DefaultDurable)
	if err != nil {
		t.Fatal(err)
	}
	delivered := cons.CachedInfo().Delivered.Consumer
	// Another client takes the next delivery and never acknowledges it.
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stolen := <-b.Messages()
	if md, err := stolen.Metadata(); err != nil || md.Sequence.Stream != wm+1 {
		t.Fatalf("stolen delivery %+v, %v; want stream sequence %d", md, err, wm+1)
	}

	l2, err := NewLoader(s, js, testOptions(50))
	if err != nil {
		t.Fatal(err)
	}
	if l2.stream, err = js.Stream(ctx, DefaultStream); err != nil {
		t.Fatal(err)
	}
	l2.wm, l2.cons, l2.lastDseq = wm, cons, delivered
	r2 := start(l2.loop)
	waitWatermark(t, s, last, r2.done)
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}
	checkExact(t, s, expect(0, 300))
	if got := metricValue(l2.m.rewinds); got != 1 {
		t.Fatalf("rewinds %v, want 1", got)
	}
}

func TestWatermarkAhead(t *testing.T) {
	js, s := newJS(t), newStore(t, ch.Addr(t))
	publish(t, js, 0, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.writeWatermark(ctx, DefaultStream, DefaultDurable, 1000, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	l, err := NewLoader(s, js, testOptions(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx); !errors.Is(err, ErrWatermarkAhead) {
		t.Fatalf("run: %v, want ErrWatermarkAhead", err)
	}
	if got := readTotals(t, s).rows; got != 0 {
		t.Fatalf("%d rows stored, want 0", got)
	}
}

func TestClickHouseOutage(t *testing.T) {
	srv := chtest.New(t)
	js, s := newJS(t), newStore(t, srv.Addr())
	l1, err := NewLoader(s, js, testOptions(200))
	if err != nil {
		t.Fatal(err)
	}
	r1 := start(l1.Run)

	// Publish 2000 events over about a second while ClickHouse goes down
	// and comes back.
	var pub sync.WaitGroup
	var last atomic.Uint64
	pubErr := make(chan error, 1)
	pub.Go(func() {
		for i := 0; i < 2000; i += 50 {
			seq, err := publishEvents(js, i, i+50)
			if err != nil {
				pubErr <- err
				return
			}
			last.Store(seq)
			time.Sleep(25 * time.Millisecond)
		}
	})
	time.Sleep(300 * time.Millisecond)
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{name: "down under load", run: func(t *testing.T) {
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			held := metricValue(l1.m.errors.WithLabelValues("store"))
			waitFor(t, r1.done, func() bool { return metricValue(l1.m.errors.WithLabelValues("store")) > held })
		}},
		{name: "back: nothing lost, nothing twice", run: func(t *testing.T) {
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			pub.Wait()
			select {
			case err := <-pubErr:
				t.Fatal(err)
			default:
			}
			waitWatermark(t, s, last.Load(), r1.done)
			checkExact(t, s, expect(0, 2000))
		}},
		{name: "shutdown while down abandons the batch", run: func(t *testing.T) {
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			last.Store(publish(t, js, 2000, 2100))
			held := metricValue(l1.m.errors.WithLabelValues("store"))
			waitFor(t, r1.done, func() bool { return metricValue(l1.m.errors.WithLabelValues("store")) > held })
			if err := r1.stop(t); err != nil {
				t.Fatalf("run: %v", err)
			}
		}},
		{name: "next run starts while down and loads the rest", run: func(t *testing.T) {
			l2, err := NewLoader(s, js, testOptions(200))
			if err != nil {
				t.Fatal(err)
			}
			r2 := start(l2.Run)
			waitFor(t, r2.done, func() bool { return metricValue(l2.m.errors.WithLabelValues("start")) > 0 })
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			waitWatermark(t, s, last.Load(), r2.done)
			if err := r2.stop(t); err != nil {
				t.Fatal(err)
			}
			checkExact(t, s, expect(0, 2100))
		}},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.run) {
			return
		}
	}
}

// fakeMsg is a delivered message for prepare; other methods are unused.
type fakeMsg struct {
	jetstream.Msg
	data []byte
}

func (m *fakeMsg) Data() []byte    { return m.data }
func (m *fakeMsg) Subject() string { return "tollgate.usage.test" }

func TestPrepare(t *testing.T) {
	enc := func(i int) []byte {
		b, err := proto.Marshal(testEvent(i))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type delivery struct {
		seq  uint64
		data []byte
	}
	tests := []struct {
		name                   string
		wm                     uint64
		in                     []delivery
		wantSeqs               []uint64
		wantTop                uint64
		stored, dup, poisonCnt float64
	}{
		{name: "all new", wm: 0, in: []delivery{{1, enc(1)}, {2, enc(2)}}, wantSeqs: []uint64{1, 2}, wantTop: 2},
		{name: "at or below the watermark", wm: 5, in: []delivery{{4, enc(4)}, {5, enc(5)}, {6, enc(6)}},
			wantSeqs: []uint64{6}, wantTop: 6, stored: 2},
		{name: "all stored", wm: 9, in: []delivery{{8, enc(8)}, {9, enc(9)}}, wantTop: 9, stored: 2},
		{name: "repeated delivery", wm: 0, in: []delivery{{1, enc(1)}, {2, enc(2)}, {1, enc(1)}},
			wantSeqs: []uint64{1, 2}, wantTop: 2, dup: 1},
		{name: "repeated event id under a new sequence", wm: 0, in: []delivery{{1, enc(1)}, {2, enc(1)}},
			wantSeqs: []uint64{1}, wantTop: 2, dup: 1},
		{name: "poison", wm: 0, in: []delivery{{1, []byte{0xff, 0xff}}, {2, enc(2)}},
			wantSeqs: []uint64{2}, wantTop: 2, poisonCnt: 1},
		{name: "deleted sequences between", wm: 0, in: []delivery{{3, enc(3)}, {7, enc(7)}},
			wantSeqs: []uint64{3, 7}, wantTop: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLoader(nil, nil, testOptions(100))
			if err != nil {
				t.Fatal(err)
			}
			l.wm = tt.wm
			var b batch
			for _, d := range tt.in {
				b.add(&fakeMsg{data: d.data}, d.seq)
			}
			b.decode()
			top, topMsg := l.prepare(&b)
			var seqs []uint64
			for _, p := range l.pending {
				seqs = append(seqs, p.src.StreamSeq)
			}
			if !slices.Equal(seqs, tt.wantSeqs) || top != tt.wantTop || topMsg == nil {
				t.Fatalf("pending %v top %d (msg %v), want %v top %d", seqs, top, topMsg, tt.wantSeqs, tt.wantTop)
			}
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"stored", metricValue(l.m.skippedStored), tt.stored},
				{"duplicate", metricValue(l.m.skippedDup), tt.dup},
				{"poison", metricValue(l.m.skippedPoison), tt.poisonCnt},
			} {
				if c.got != c.want {
					t.Errorf("skipped %s = %v, want %v", c.name, c.got, c.want)
				}
			}
		})
	}
}

func TestLoaderOptions(t *testing.T) {
	tests := []struct {
		name    string
		o       LoaderOptions
		wantErr bool
	}{
		{name: "defaults", o: LoaderOptions{}},
		{name: "ack wait too short for the interval", o: LoaderOptions{AckWait: 2 * time.Second, BatchInterval: time.Second}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := tt.o.withDefaults()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (o.BatchSize != 10000 || o.BatchInterval != time.Second || o.Durable != "analytics" || o.Stream != "TOLLGATE_USAGE") {
				t.Fatalf("defaults %+v", o)
			}
		})
	}
}

// TestInsertOutlivesTimeout makes every insert outlast the client's
// timeout: the server still stores it after the client gave up, and the
// loader must find it stored rather than insert it again. ClickHouse 18.16
// has no insert_deduplication_token, so this lookup is what makes a
// retried insert idempotent, for legacy and batched messages alike.
func TestInsertOutlivesTimeout(t *testing.T) {
	for _, tt := range []struct {
		name string
		per  int // events per batch message; 0: legacy single events
	}{
		{name: "legacy"},
		{name: "batches", per: 30},
	} {
		t.Run(tt.name, func(t *testing.T) {
			js, s := newJS(t), newStore(t, ch.Addr(t))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, q := range []string{
				"CREATE TABLE slow_sink (s UInt8) ENGINE = Null",
				"CREATE MATERIALIZED VIEW slow_mv TO slow_sink AS SELECT sleep(0.3) AS s FROM usage_events",
			} {
				if err := s.conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			var last uint64
			if tt.per == 0 {
				last = publish(t, js, 0, 300)
			} else {
				for i, seq := 0, uint64(1); i < 300; i, seq = i+tt.per, seq+1 {
					last = publishBatch(t, js, "gwaaaaaaaaaaaaaa", seq, i, i+tt.per).Sequence
				}
			}
			o := testOptions(100)
			o.InsertTimeout, o.LeaseTTL = 100*time.Millisecond, 600*time.Millisecond
			l := loadUntil(t, s, js, o, last)
			checkExact(t, s, expect(0, 300))
			if got := metricValue(l.m.errors.WithLabelValues("store")); got == 0 {
				t.Fatal("no insert timed out; the test proves nothing")
			}
		})
	}
}

// TestReconnectRewinds: after NATS restarts (here on the same store, with
// nothing lost), the loader starts over from its watermark, which checks
// the stream's history there, and loads what follows exactly once.
func TestReconnectRewinds(t *testing.T) {
	js, ns := newJSServer(t)
	s := newStore(t, ch.Addr(t))
	l, err := NewLoader(s, js, testOptions(50))
	if err != nil {
		t.Fatal(err)
	}
	r := start(l.Run)
	waitWatermark(t, s, publish(t, js, 0, 100), r.done)
	natstest.Restart(t, ns)
	waitFor(t, r.done, func() bool { // JetStream answers again
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	waitWatermark(t, s, publish(t, js, 100, 200), r.done)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	checkExact(t, s, expect(0, 200))
	if got := metricValue(l.m.rewinds); got < 1 {
		t.Fatalf("rewinds %v after the reconnect, want at least 1", got)
	}
}
