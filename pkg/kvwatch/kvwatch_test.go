package kvwatch

import (
	"context"
	"sync"
	"testing"
	"time"

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
