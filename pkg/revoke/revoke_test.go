package revoke

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/natstest"

	"github.com/tollgate/tollgate/pkg/testkit"
)

func setup(t *testing.T) (jetstream.KeyValue, *Watcher, *[]time.Duration) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	var delays []time.Duration
	// Revocations written before the watcher starts are loaded, not observed.
	if err := Revoke(ctx, kv, Subject, "old", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(nil, func(d time.Duration) { delays = append(delays, d) })
	done := make(chan struct{})
	go func() { _ = w.Run(ctx, kv); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-w.Ready()
	return kv, w, &delays
}

func TestRevokeAndUnrevoke(t *testing.T) {
	kv, w, _ := setup(t)
	ctx := context.Background()
	if !w.Revoked("", "old") {
		t.Fatal("revocation present at start not loaded")
	}
	tests := []struct {
		name        string
		kind        Kind
		value       string
		jti, sub    string
		wantRevoked bool
	}{
		{"by jti", KeyID, "key-1", "key-1", "bob", true},
		{"other jti passes", KeyID, "key-1", "key-2", "bob", false},
		{"by subject", Subject, "mallory", "any", "mallory", true},
		{"odd bytes", Subject, "a.b*c>d é", "", "a.b*c>d é", true},
		{"empty values never match", KeyID, "key-1", "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Revoke(ctx, kv, tc.kind, tc.value, "test", time.Now()); err != nil {
				t.Fatal(err)
			}
			testkit.Wait(t, 5*time.Second, fmt.Sprintf("Revoked(%q, %q) to become %v", tc.jti, tc.sub, tc.wantRevoked),
				func() bool { return w.Revoked(tc.jti, tc.sub) == tc.wantRevoked })
		})
	}
	if err := Unrevoke(ctx, kv, KeyID, "key-1"); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 5*time.Second, "the unrevoke to propagate", func() bool { return !w.Revoked("key-1", "bob") })
	list, err := List(ctx, kv)
	if err != nil || len(list) != 3 {
		t.Errorf("list = %v, %v; want 3 entries", list, err)
	}
	if err := Revoke(ctx, kv, "bogus", "x", "", time.Now()); err == nil {
		t.Error("unknown kind accepted")
	}
}

// BenchmarkPropagation measures revoke -> watcher refuses, reporting the
// p50, the max and, with 100 samples or more, the p99 (target p99 under
// 100 ms).
func BenchmarkPropagation(b *testing.B) {
	nc := natstest.Connect(b, natstest.Start(b))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := EnsureBucket(ctx, js, 1)
	if err != nil {
		b.Fatal(err)
	}
	w := NewWatcher(nil, nil)
	go func() { _ = w.Run(ctx, kv) }()
	<-w.Ready()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		jti := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		if err := Revoke(ctx, kv, KeyID, jti, "", start); err != nil {
			b.Fatal(err)
		}
		for !w.Revoked(jti, "") {
			time.Sleep(50 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	if len(lat) >= 100 { // fewer samples have no p99 of their own
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}

func BenchmarkRevoked(b *testing.B) {
	w := NewWatcher(nil, nil)
	w.publish(map[string]Entry{"a": {Kind: KeyID, Value: "k1"}, "b": {Kind: Subject, Value: "s1"}})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if w.Revoked("k2", "s2") {
			b.Fatal("revoked")
		}
	}
}
