package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/testkit"
)

// BenchmarkKVFanout measures two unit costs of the capacity model on a
// real nats-server process (the binary, as in production): KV writes a
// second into one bucket (16 writers, as a fold writes its totals
// concurrently, over 10,000 keys), and the deliveries a second when
// watchers (gateways) each watch every key, as the budget Tracker does.
//
//	go test -run '^$' -bench KVFanout -benchtime 20000x ./scripts/capsim
func BenchmarkKVFanout(b *testing.B) {
	for _, watchers := range []int{0, 4, 16} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) { benchKVFanout(b, watchers) })
	}
}

func benchKVFanout(b *testing.B, watchers int) {
	url, stop := natstest.StartBinary(b)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	connect := func() jetstream.JetStream {
		nc, err := nats.Connect(url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		return js
	}
	js := connect()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fanout", History: 1})
	if err != nil {
		b.Fatal(err)
	}
	var delivered atomic.Int64
	for range watchers {
		w, err := connect().KeyValue(ctx, "fanout")
		if err != nil {
			b.Fatal(err)
		}
		wt, err := w.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for e := range wt.Updates() {
				if e != nil {
					delivered.Add(1)
				}
			}
		}()
	}
	const writers, keys = 16, 10_000
	val := make([]byte, 120) // a total's encoding is about this size
	b.ResetTimer()
	begin := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if _, err := kv.Put(ctx, fmt.Sprintf("t.%d", i%keys), val); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	writeTime := time.Since(begin)
	want := int64(watchers) * int64(b.N)
	testkit.Wait(b, 5*time.Minute, "every watcher to see every write", func() bool { return delivered.Load() >= want })
	all := time.Since(begin)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/writeTime.Seconds(), "writes/s")
	if watchers > 0 {
		b.ReportMetric(float64(delivered.Load())/all.Seconds(), "deliveries/s")
	}
}
