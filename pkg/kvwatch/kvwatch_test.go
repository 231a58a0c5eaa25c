package kvwatch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/natstest"
)

// TestRun: the initial values arrive with loaded false and are published
// once, with ready closed; later puts and deletes arrive with loaded true
// and are published when apply says the view changed.
func TestRun(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "kvwatch_test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	view := map[string]string{}
	var published []map[string]string
	var loadedAt []bool
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, kv, "kvwatch_test", ready, func(e jetstream.KeyValueEntry, loaded bool) bool {
			mu.Lock()
			defer mu.Unlock()
			loadedAt = append(loadedAt, loaded)
			if string(e.Value()) == "ignored" {
				return false
			}
			if e.Operation() != jetstream.KeyValuePut {
				delete(view, e.Key())
			} else {
				view[e.Key()] = string(e.Value())
			}
			return true
		}, func() {
			mu.Lock()
			defer mu.Unlock()
			snap := map[string]string{}
			for k, v := range view {
				snap[k] = v
			}
			published = append(published, snap)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("not ready")
	}
	for _, step := range []func() error{
		func() error { _, err := kv.Put(ctx, "b", []byte("2")); return err },
		func() error { _, err := kv.Put(ctx, "c", []byte("ignored")); return err },
		func() error { return kv.Delete(ctx, "a") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(published)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(published) != 3 || len(published[0]) != 1 || published[1]["b"] != "2" || published[2]["a"] != "" || len(published[2]) != 1 {
		t.Fatalf("published %v, want {a}, {a b}, {b}", published)
	}
	if len(loadedAt) != 4 || loadedAt[0] || !loadedAt[1] || !loadedAt[3] {
		t.Errorf("loaded flags %v, want false for the initial value, true after", loadedAt)
	}
}

// TestRunStopsOnce: when ctx ends, Run returns at once and the watch's
// consumer is deleted with one request, the client's own (the watch was
// opened with ctx). Run stopping the watch as well sent a second delete
// of the same consumer, which a clustered nats-server leaves unanswered:
// Run then returned only after the client's 5 s request timeout.
func TestRunStopsOnce(t *testing.T) {
	s := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "kvwatch_stop"})
	if err != nil {
		t.Fatal(err)
	}
	var deletes, stops atomic.Int64
	spy := natstest.Connect(t, s)
	if _, err := spy.Subscribe("$JS.API.CONSUMER.DELETE.KV_kvwatch_stop.>", func(*nats.Msg) { deletes.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, stopCountingKV{kv, &stops}, "kvwatch_stop", ready,
			func(jetstream.KeyValueEntry, bool) bool { return true }, func() {})
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("not ready")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Run did not return within 1s of ctx's end")
	}
	deadline := time.Now().Add(5 * time.Second)
	for deletes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // room for a second request
	if n := deletes.Load(); n != 1 {
		t.Errorf("%d consumer delete requests, want 1", n)
	}
	if n := stops.Load(); n != 0 {
		t.Errorf("Run stopped the watch %d times; the client stops it when ctx ends", n)
	}
}

// stopCountingKV counts the Stop calls on the watchers it opens.
type stopCountingKV struct {
	jetstream.KeyValue
	stops *atomic.Int64
}

func (kv stopCountingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := kv.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return stopCountingWatcher{w, kv.stops}, nil
}

type stopCountingWatcher struct {
	jetstream.KeyWatcher
	stops *atomic.Int64
}

func (w stopCountingWatcher) Stop() error {
	w.stops.Add(1)
	return w.KeyWatcher.Stop()
}
