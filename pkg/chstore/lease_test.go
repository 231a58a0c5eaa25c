package chstore

import (
	"context"
	"testing"
	"time"
)

func TestLease(t *testing.T) {
	const ttl = 600 * time.Millisecond
	js := newJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func() *lease {
		ls, err := newLease(ctx, js, "leases", "k", ttl, 1)
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}
	a, b := open(), open()
	acquire := func(ls *lease) bool {
		ok, err := ls.tryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * ttl)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after %v", what, 5*ttl)
			}
			time.Sleep(ttl / 20)
		}
	}

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{name: "first comer holds it", run: func(t *testing.T) {
			if !acquire(a) || !a.held(ttl/2) {
				t.Fatal("a did not get the free lease")
			}
			if acquire(b) || b.held(0) {
				t.Fatal("b got a held lease")
			}
		}},
		{name: "renewed past its ttl", run: func(t *testing.T) {
			time.Sleep(2 * ttl)
			if !a.held(ttl/2) || acquire(b) {
				t.Fatal("a lost a lease it renews")
			}
		}},
		{name: "a clean release hands over at once", run: func(t *testing.T) {
			a.release(ctx)
			if a.held(0) || !acquire(b) {
				t.Fatal("b did not get the released lease")
			}
		}},
		{name: "a holder that stops renewing loses it after the ttl", run: func(t *testing.T) {
			b.mu.Lock()
			stop := b.stop
			b.stop = nil
			b.mu.Unlock()
			stop() // as if b's process hung: no renewal, no delete
			start := time.Now()
			eventually("a takes over", func() bool { return acquire(a) })
			if waited := time.Since(start); waited < ttl/2 {
				t.Fatalf("a took over after %v, before b's lease ran out", waited)
			}
			if b.held(0) {
				t.Fatal("b still believes it holds the lease")
			}
		}},
		{name: "a holder whose key is taken notices", run: func(t *testing.T) {
			kv, err := js.KeyValue(ctx, "leases")
			if err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Create(ctx, "k", []byte("intruder")); err != nil {
				t.Fatal(err)
			}
			eventually("a gives up", func() bool { return !a.held(0) })
			a.release(ctx) // must not delete the intruder's key
			e, err := kv.Get(ctx, "k")
			if err != nil || string(e.Value()) != "intruder" {
				t.Fatalf("key = %v, %v; want the intruder's", e, err)
			}
		}},
		{name: "a deleted bucket is created again", run: func(t *testing.T) {
			a.release(ctx)
			if err := js.DeleteKeyValue(ctx, "leases"); err != nil {
				t.Fatal(err)
			}
			if ok, err := a.tryAcquire(ctx); ok || err == nil {
				t.Fatalf("acquire in a deleted bucket = %v, %v; want an error", ok, err)
			}
			if !acquire(a) {
				t.Fatal("a did not get the lease in the recreated bucket")
			}
			a.release(ctx)
		}},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.run) {
			return
		}
	}
}

// leaseOptions are loader options with a short lease.
func leaseOptions() LoaderOptions {
	o := testOptions(100)
	o.InsertTimeout = 2 * time.Second
	o.LeaseTTL = 6 * time.Second
	return o
}

func TestStandbyTakesOver(t *testing.T) {
	js, s := newJS(t), newStore(t, ch.Addr(t))
	a, err := NewLoader(s, js, leaseOptions())
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewLoader(s, js, leaseOptions())
	if err != nil {
		t.Fatal(err)
	}
	ra := start(a.Run)
	waitFor(t, ra.done, func() bool { return metricValue(a.m.leader) == 1 })
	rb := start(b.Run)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{name: "one loads, the other stands by", run: func(t *testing.T) {
			waitWatermark(t, s, publish(t, js, 0, 300), ra.done)
			if metricValue(b.m.leader) != 0 || metricValue(b.m.rows) != 0 {
				t.Fatalf("standby leads (%v) or loaded %v rows", metricValue(b.m.leader), metricValue(b.m.rows))
			}
		}},
		{name: "the standby takes over when the holder stops", run: func(t *testing.T) {
			if err := ra.stop(t); err != nil {
				t.Fatal(err)
			}
			waitFor(t, rb.done, func() bool { return metricValue(b.m.leader) == 1 })
			waitWatermark(t, s, publish(t, js, 300, 600), rb.done)
		}},
		{name: "a holder whose lease is taken stops loading", run: func(t *testing.T) {
			kv, err := js.KeyValue(ctx, b.o.LeaseBucket)
			if err != nil {
				t.Fatal(err)
			}
			key := b.o.Stream + "." + b.o.Durable
			if err := kv.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Create(ctx, key, []byte("intruder")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, rb.done, func() bool { return metricValue(b.m.leader) == 0 })
			rows := metricValue(b.m.rows)
			last := publish(t, js, 600, 700)
			time.Sleep(300 * time.Millisecond)
			if got := metricValue(b.m.rows); got != rows {
				t.Fatalf("loaded %v rows without the lease", got-rows)
			}
			// The intruder goes away; b takes the lease back and loads.
			if err := kv.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			waitWatermark(t, s, last, rb.done)
		}},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.run) {
			return
		}
	}
	if err := rb.stop(t); err != nil {
		t.Fatal(err)
	}
	checkExact(t, s, expect(0, 700))
}
