package budget

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// benchEvent spreads events over 200 keys, 50 subjects, 20 teams, 5 depts
// and 10 projects within one day.
func benchEvent(i int, at time.Time) ev {
	return ev{at: at.Add(time.Duration(i) * time.Millisecond),
		key: fmt.Sprintf("key-%d", i%200), subject: fmt.Sprintf("user-%d", i%50), team: fmt.Sprintf("team-%d", i%20),
		dept: fmt.Sprintf("dept-%d", i%5), project: fmt.Sprintf("proj-%d", i%10), costNano: 1234, prompt: 100, completion: 20}
}

// BenchmarkConsumer measures events folded into KV totals per second: b.N
// events are published first, then one Consumer applies them all. Legacy
// messages hold one event each (the stream before batches; the baseline);
// batched ones hold a producer's batch of 100 events, from 4 producers
// taking turns. batch is ConsumerOptions.Batch, in messages: 4000 events
// per fold for legacy batch=4000 and for batched batch=40.
func BenchmarkConsumer(b *testing.B) {
	for _, tc := range []struct {
		perMsg, batch int
	}{{1, 1000}, {1, 4000}, {100, 40}, {100, 400}} {
		shape := "legacy"
		if tc.perMsg > 1 {
			shape = fmt.Sprintf("batched=%d", tc.perMsg)
		}
		b.Run(fmt.Sprintf("%s/batch=%d", shape, tc.batch), func(b *testing.B) { benchConsumer(b, tc.perMsg, tc.batch) })
	}
}

func benchConsumer(b *testing.B, perMsg, batch int) {
	e := startEnv(b)
	at := utc(2026, 12, 1, 0, 0, 0)
	ctx := context.Background()
	var ub usagev1.UsageBatch
	seqs := map[string]uint64{}
	for i := range b.N {
		x := benchEvent(i, at)
		ev := x.proto(fmt.Sprintf("bench-%d", i))
		var subj string
		var data []byte
		var err error
		if perMsg == 1 {
			subj = "tollgate.usage." + x.dept
			data, err = proto.Marshal(ev)
		} else {
			ub.Events = append(ub.Events, ev)
			if len(ub.Events) < perMsg && i < b.N-1 {
				continue
			}
			ub.ProducerId = fmt.Sprintf("bench-producer-%d", (i/perMsg)%4)
			seqs[ub.ProducerId]++
			ub.Seq = seqs[ub.ProducerId]
			subj = usage.BatchSubject(ub.ProducerId)
			data, err = proto.Marshal(&ub)
			ub.Events = ub.Events[:0]
		}
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.js.PublishAsync(subj, data); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 || i == b.N-1 {
			select {
			case <-e.js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publish did not complete")
			}
		}
	}
	info, err := e.js.Stream(ctx, Stream)
	if err != nil {
		b.Fatal(err)
	}
	last := info.CachedInfo().State.LastSeq
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	stop := run(b, newConsumer(b, e.newJS(b), ConsumerOptions{Batch: batch}))
	testkit.Wait(b, 5*time.Minute, "the condition", func() bool {
		st := e.total(b, TotalID{Scope: ScopeGlobal, Period: PeriodTotal})
		return st != nil && st.AsOfSeq >= last
	})
	elapsed := time.Since(start)
	b.StopTimer()
	_ = stop()
	if st := e.total(b, TotalID{Scope: ScopeGlobal, Period: PeriodTotal}); st.Requests != uint64(b.N) || st.CostNanoUsd != int64(b.N)*1234 {
		b.Fatalf("global total %d requests, %d nano; want %d, %d", st.Requests, st.CostNanoUsd, b.N, b.N*1234)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

// BenchmarkTrackerCheckReserve is the gateway's per-request work
// (pkg/gateway admit): Headroom, Reserve, CheckReserved, Settle, Published
// (totals already cover it, so released at once), over 1,000 principals
// with a key claim, three configured limits applying to each, in parallel
// on every core. Expected: 1 alloc/op (the Reservation). Without the
// per-scope sums of reservations that every request added to (the
// metric's sum is taken over the slots at scrape time instead), 1308-1361
// -> 806-831 ns/op on the 2-core bench machine (2026-12-04, 3 runs each):
// every request added to those six counters three times (reserve, settle,
// release), as it still does to the three slots of the global totals.
func BenchmarkTrackerCheckReserve(b *testing.B) {
	limits := []Limit{
		{Scope: ScopeDept, Value: Star, Period: PeriodMonth, AmountNano: 1 << 60},
		{Scope: ScopeTeam, Value: "*/team-1", Period: PeriodDay, AmountNano: 1 << 60},
		{Scope: ScopeGlobal, Period: PeriodTotal, AmountNano: 1 << 60},
	}
	claims := []Limit{{Scope: ScopeKey, Value: Star, Period: PeriodDay, AmountNano: 1 << 60}}
	tr := NewTracker(TrackerOptions{Limits: limits})
	scopes := make([]Scopes, 1000)
	for i := range scopes {
		x := benchEvent(i, time.Time{})
		scopes[i] = NewScopes(x.key, x.subject, x.dept, x.team, x.project)
		tr.Bind(scopes[i]).Reserve(0).Release() // create the slots
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var dst [8]Checked
		i := 0
		for pb.Next() {
			s := scopes[i%len(scopes)]
			bd := tr.Bind(s)
			if _, limited := bd.Headroom(claims); !limited {
				b.Error("no limit applies")
				return
			}
			r := bd.Reserve(1000)
			if _, _, err := bd.CheckReserved(context.Background(), claims, 1000, dst[:0]); err != nil {
				b.Error(err)
				return
			}
			r.Settle(900)
			r.Published(0)
			i++
		}
	})
}

// BenchmarkNewScopes is the per-request cost of qualifying team and project
// by department, against the flat struct literal it replaced (baseline).
// Expected: 0 allocs/op flat; 1 alloc/op qualified (team and project share
// one string).
func BenchmarkNewScopes(b *testing.B) {
	var sink Scopes
	b.Run("flat", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			sink = Scopes{Key: "k1", Subject: "alice", Dept: "research", Team: "ml", Project: "p1"}
		}
	})
	b.Run("qualified", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			sink = NewScopes("k1", "alice", "research", "ml", "p1")
		}
	})
	_ = sink
}

// BenchmarkPropagation measures publish -> consumer -> KV -> Tracker: the
// time until the Tracker sees a published event in the global total.
// Run with -benchtime=200x for 200 samples.
func BenchmarkPropagation(b *testing.B) {
	e := startEnv(b)
	run(b, newConsumer(b, e.js, ConsumerOptions{}))
	tr := NewTracker(TrackerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, e.kv) }()
	defer func() { cancel(); <-done }()
	<-tr.Ready()
	global := TotalID{Scope: ScopeGlobal, Period: PeriodTotal}
	at := time.Now()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		seq := e.publish(b, benchEvent(i, at))
		for {
			if _, _, asOf := tr.Spend(global); asOf >= seq {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// BenchmarkAdmission is the gateway's budget check per request: Reserve,
// CheckReserved, Settle, and Published (the totals already cover it, so
// released at once as applied). It reports the check's latency, p50 and
// p99 (CheckReserved alone, refill waits included). Variants: leases off
// (the check before leases), and leases on far from the limit (one
// gateway holding the whole headroom) and near it (two gateways sharing a
// headroom of 200 requests, so slices are small and refills constant).
// Expected: 1 alloc/op (the Reservation) except when a request waits.
// With the other holders' slices read from a slice kept with the lease's
// view instead of its record's map, leases on and far from the limit cost
// what leases off do: 692-746 -> 574-591 ns/op (2026-12-04, 3 runs each).
func BenchmarkAdmission(b *testing.B) {
	const est = 1000
	for _, bc := range []struct {
		name     string
		leases   bool
		gateways int
		limit    int64
	}{
		{"leases=off/far", false, 1, 1 << 60},
		{"leases=on/far", true, 1, 1 << 60},
		{"leases=on/near", true, 2, 200 * est},
	} {
		b.Run(bc.name, func(b *testing.B) {
			limits := []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodTotal, AmountNano: bc.limit}}
			trs := make([]*Tracker, bc.gateways)
			e := startEnv(b)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			for i := range trs {
				o := TrackerOptions{Limits: limits}
				if bc.leases {
					o.Leases = &LeaseOptions{ID: "gw-" + itoa(i)}
				}
				trs[i] = NewTracker(o)
				js := e.newJS(b)
				kv, err := js.KeyValue(ctx, Bucket)
				if err != nil {
					b.Fatal(err)
				}
				lkv, err := EnsureLeaseBucket(ctx, js, 1, 0)
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(2)
				go func() { defer wg.Done(); _ = trs[i].Run(ctx, kv) }()
				go func() { defer wg.Done(); _ = trs[i].RunLeases(ctx, lkv) }()
				<-trs[i].Ready()
				<-trs[i].LeasesReady()
			}
			s := Scopes{Dept: "eng", Team: "ml"}
			var dst [8]Checked
			admit := func(tr *Tracker) (time.Duration, error) {
				bd := tr.Bind(s)
				r := bd.Reserve(est)
				start := time.Now()
				_, _, err := bd.CheckReserved(ctx, nil, est, dst[:0])
				d := time.Since(start)
				if err != nil {
					r.Release()
					return d, err
				}
				r.Settle(est)
				r.Published(0)
				return d, nil
			}
			for _, tr := range trs { // the first grants
				if _, err := admit(tr); err != nil {
					b.Fatal(err)
				}
			}
			var waits0 uint64
			for _, tr := range trs {
				waits0 += tr.LeaseStats().Waits
			}
			lat := make([]time.Duration, 0, b.N)
			refused := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				d, err := admit(trs[i%len(trs)])
				if err != nil {
					refused++
				}
				lat = append(lat, d)
			}
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1000 }
			b.ReportMetric(q(0.5), "p50-us")
			b.ReportMetric(q(0.99), "p99-us")
			b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
			waits := -waits0
			for _, tr := range trs {
				waits += tr.LeaseStats().Waits
			}
			b.ReportMetric(float64(waits)/float64(b.N), "waits/op")
		})
	}
}

// BenchmarkSweepBacklog is one sweep of the watch loop over a backlog of
// published reservations that no total covers yet, as when the budget
// consumer is down: "totals still" (nothing stored since the last sweep;
// the sweep looks only at what was published since, here one
// reservation) against the baseline "a total moved" (every reservation
// must be looked at again). Expected: still costs the same at any backlog.
func BenchmarkSweepBacklog(b *testing.B) {
	limits := []Limit{{Scope: ScopeDept, Value: Star, Period: PeriodMonth, AmountNano: 1 << 60}}
	for _, n := range []int{1_000, 100_000} {
		for _, moved := range []bool{false, true} {
			name := fmt.Sprintf("backlog=%d/totals-still", n)
			if moved {
				name = fmt.Sprintf("backlog=%d/a-total-moved", n)
			}
			b.Run(name, func(b *testing.B) {
				tr := NewTracker(TrackerOptions{Limits: limits})
				s := NewScopes("", "alice", "research", "nlp", "bench")
				for i := range n {
					tr.Bind(s).Reserve(1000).Published(uint64(i + 1))
				}
				now := time.Now().UnixNano()
				tr.sweep(now)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					tr.Bind(s).Reserve(1000).Published(uint64(n + i + 1))
					if moved {
						tr.applied++
					}
					tr.sweep(now)
				}
				b.StopTimer()
				if got := len(tr.pending); got < n {
					b.Fatalf("%d reservations pending, want at least %d: none is covered", got, n)
				}
			})
		}
	}
}
