package chstore

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/usage"
)

// benchOptions are the defaults (batches of 10,000 or 1s) without logs.
func benchOptions() LoaderOptions {
	return LoaderOptions{
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry(),
	}
}

// BenchmarkLoad measures load throughput: b.N events already in the stream
// are loaded into ClickHouse by one Loader with default batching, once as
// legacy single-event messages and once as batched messages of 100 events
// (the gateway's envelope). Run with e.g. -benchtime=200000x; events/s is
// the figure that matters. It also reports the CPU the ClickHouse server
// (server-cpu-%) and this process (self-cpu-%: the loader, and the
// embedded NATS server delivering the events) used while loading, as a
// share of one core: on this machine's 2 cores, the side near 100% or the
// pair near 200% is the limit. The CPU microseconds per event of each side
// are what the machine's cores must supply: they depend far less than
// events/s on what else runs.
func BenchmarkLoad(b *testing.B) {
	for _, bc := range []struct {
		name string
		per  int // events per message; 0: legacy single events
	}{
		{name: "legacy"},
		{name: "batches-100", per: 100},
	} {
		b.Run(bc.name, func(b *testing.B) { benchLoad(b, bc.per) })
	}
}

func benchLoad(b *testing.B, per int) {
	js, s := newJS(b), newStore(b, ch.Addr(b))
	var last uint64
	if per == 0 {
		last = publish(b, js, 0, b.N)
	} else {
		last = publishBatches(b, js, b.N, per)
	}
	l, err := NewLoader(s, js, benchOptions())
	if err != nil {
		b.Fatal(err)
	}
	cpu := newCPUClock(ch.Server(b).Dir())
	b.ReportAllocs()
	b.ResetTimer()
	self0, server0 := cpu.read()
	begin := time.Now()
	r := start(l.Run)
	for metricValue(l.m.watermark) < float64(last) {
		select {
		case err := <-r.done:
			b.Fatalf("loader stopped: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(begin)
	self1, server1 := cpu.read()
	b.StopTimer()
	if err := r.stop(b); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(100*(self1-self0).Seconds()/elapsed.Seconds(), "self-cpu-%")
	b.ReportMetric(float64((self1-self0)/time.Microsecond)/float64(b.N), "self-cpu-us/event")
	if cpu.serverPID != 0 {
		b.ReportMetric(100*(server1-server0).Seconds()/elapsed.Seconds(), "server-cpu-%")
		b.ReportMetric(float64((server1-server0)/time.Microsecond)/float64(b.N), "server-cpu-us/event")
	}
	if got := readTotals(b, s).rows; got != uint64(b.N) {
		b.Fatalf("%d rows, want %d", got, b.N)
	}
}

// publishBatches publishes test events 0..n-1 as batches of per events of
// one producer, and returns the last one's stream sequence.
func publishBatches(b *testing.B, js jetstream.JetStream, n, per int) uint64 {
	b.Helper()
	const producer = "gwbenchbenchbenc"
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var futures []jetstream.PubAckFuture
	seq := uint64(0)
	for i := 0; i < n; i += per {
		seq++
		data, err := proto.Marshal(testBatch(producer, seq, i, min(i+per, n)))
		if err != nil {
			b.Fatal(err)
		}
		f, err := js.PublishAsync(usage.BatchSubject(producer), data, jetstream.WithMsgID(usage.BatchMsgID(producer, seq)))
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
	}
	var last uint64
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			last = max(last, ack.Sequence)
		case err := <-f.Err():
			b.Fatalf("publish: %v", err)
		case <-ctx.Done():
			b.Fatal("publish: no ack")
		}
	}
	return last
}

// BenchmarkFreshness measures how long an event takes from publish to
// being visible in ClickHouse with default batching (10,000 events or 1s),
// at a steady 2,000 events/s. It reports the p50 and p99 in milliseconds.
func BenchmarkFreshness(b *testing.B) {
	const rate = 2000 // events/s
	js, s := newJS(b), newStore(b, ch.Addr(b))
	l, err := NewLoader(s, js, benchOptions())
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	l.onInsert = func(evs []pendingEvent) {
		now := time.Now()
		mu.Lock()
		for _, p := range evs {
			lat = append(lat, now.Sub(time.Unix(0, p.ev.Timestamp)))
		}
		mu.Unlock()
	}
	r := start(l.Run)
	waitFor(b, r.done, func() bool { return metricValue(l.m.leader) == 1 })

	b.ReportAllocs()
	b.ResetTimer()
	begin := time.Now()
	for i := range b.N {
		if d := time.Until(begin.Add(time.Duration(i) * time.Second / rate)); d > 0 {
			time.Sleep(d)
		}
		ev := testEvent(i)
		ev.Timestamp = time.Now().UnixNano()
		data, err := proto.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync("tollgate.usage."+ev.Dept, data); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		b.Fatal("publishes not acknowledged")
	}
	b.StopTimer()
	waitFor(b, r.done, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(lat) == b.N
	})
	if err := r.stop(b); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// BenchmarkPrepare measures decoding and deduplicating a fetched batch of
// 1000 events, per event: as legacy single-event messages and as 10
// batched messages of 100. Allocations are the decoded strings (about 20
// per event).
func BenchmarkPrepare(b *testing.B) {
	const size = 1000
	for _, bc := range []struct {
		name string
		per  int // events per message; 0: legacy single events
	}{
		{name: "legacy"},
		{name: "batches-100", per: 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := NewLoader(nil, nil, testOptions(size))
			if err != nil {
				b.Fatal(err)
			}
			var msgs []jetstream.Msg
			for i := 0; i < size; i += max(1, bc.per) {
				var m proto.Message = testEvent(i)
				if bc.per > 0 {
					m = testBatch("gwbenchbenchbenc", uint64(len(msgs)+1), i, i+bc.per)
				}
				data, err := proto.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				msgs = append(msgs, &fakeMsg{data: data})
			}
			var bt batch
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += size {
				bt.reset()
				l.dedup = &usage.Dedup{}
				for j, m := range msgs {
					bt.add(m, uint64(j+1))
				}
				bt.decode()
				l.prepare(&bt)
			}
		})
	}
}

// BenchmarkColumnsAdd measures turning decoded events into insert columns,
// per event: 0 allocs/op once the columns have grown.
func BenchmarkColumnsAdd(b *testing.B) {
	const batch = 1000
	evs := make([]*pendingEvent, batch)
	for i := range evs {
		evs[i] = &pendingEvent{ev: testEvent(i), src: Source{StreamSeq: uint64(i + 1)}}
	}
	var c columns
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%batch == 0 {
			c.reset()
		}
		p := evs[i%batch]
		c.add(p.ev, p.src, now)
	}
}
