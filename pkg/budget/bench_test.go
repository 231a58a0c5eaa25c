package budget

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

// benchEvent spreads events over 200 keys, 50 subjects, 20 teams, 5 depts
// and 10 projects within one day.
func benchEvent(i int, at time.Time) ev {
	return ev{at: at.Add(time.Duration(i) * time.Millisecond),
		key: fmt.Sprintf("key-%d", i%200), subject: fmt.Sprintf("user-%d", i%50), team: fmt.Sprintf("team-%d", i%20),
		dept: fmt.Sprintf("dept-%d", i%5), project: fmt.Sprintf("proj-%d", i%10), costNano: 1234, prompt: 100, completion: 20}
}

// BenchmarkConsumer measures events folded into KV totals per second: b.N
// events are published first, then one Consumer applies them all.
func BenchmarkConsumer(b *testing.B) {
	for _, batch := range []int{1000, 4000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchConsumer(b, batch) })
	}
}

func benchConsumer(b *testing.B, batch int) {
	e := startEnv(b)
	at := utc(2026, 12, 1, 0, 0, 0)
	ctx := context.Background()
	for i := range b.N {
		x := benchEvent(i, at)
		data, err := proto.Marshal(x.proto(fmt.Sprintf("bench-%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.js.PublishAsync("tollgate.usage."+x.dept, data); err != nil {
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
	waitFor(b, 5*time.Minute, func() bool {
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

// BenchmarkTrackerCheckReserve is the gateway's per-request work: Check,
// Reserve, Settle, Published (totals already cover it, so released at once).
// Expected: 1 alloc/op (the Reservation).
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
		tr.Reserve(scopes[i], 0).Release() // create the slots
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s := scopes[i%len(scopes)]
			if err := tr.Check(s, claims, 1000); err != nil {
				b.Error(err)
				return
			}
			r := tr.Reserve(s, 1000)
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
