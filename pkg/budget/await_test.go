package budget

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// TestAwaitAck follows reservations through the ack protocol the tracker
// owns: acknowledged ones wait for the totals, unacknowledged ones go after
// AckWait (their event is in the spool), forgotten ones are the owner's.
func TestAwaitAck(t *testing.T) {
	e := startEnv(t)
	var clock atomic.Int64
	start := utc(2026, 12, 1, 12, 0, 0)
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	tr := runTracker(t, e, TrackerOptions{Now: now, AckWait: time.Minute})
	dept := TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodTotal}
	reserved := func() int64 { _, r, _ := tr.Spend(dept); return r }

	acked := tr.Bind(Scopes{Dept: "eng"}).Reserve(100)
	tr.Await("ev-acked", acked)
	unacked := tr.Bind(Scopes{Dept: "eng"}).Reserve(10)
	tr.Await("ev-spooled", unacked)
	forgotten := tr.Bind(Scopes{Dept: "eng"}).Reserve(1)
	tr.Await("ev-not-enqueued", forgotten)
	if got := tr.Awaiting(); got != 3 {
		t.Fatalf("Awaiting() = %d, want 3", got)
	}
	if !tr.Forget("ev-not-enqueued") || tr.Forget("ev-not-enqueued") {
		t.Error("Forget must report the reservation once")
	}
	forgotten.Release()
	tr.OnAck("ev-acked", 1_000_000) // a sequence no total covers yet
	tr.OnAck("ev-unknown", 5)       // no reservation: ignored
	if got := tr.Awaiting(); got != 1 {
		t.Fatalf("Awaiting() after ack and forget = %d, want 1", got)
	}
	if got := reserved(); got != 110 {
		t.Fatalf("reserved %d, want 110: an acked reservation stays until the totals cover it", got)
	}
	// Past AckWait the watch loop releases the spooled event's reservation.
	clock.Add(int64(time.Minute + time.Second))
	testkit.Wait(t, 5*time.Second, "the condition", func() bool { return tr.Awaiting() == 0 })
	if got, n := reserved(), tr.Unacked(); got != 100 || n != 1 {
		t.Errorf("after AckWait: reserved %d (want 100), unacked released %d (want 1)", got, n)
	}
}

// TestTrackerSleepsWhenIdle: with nothing reserved the watch loop does not
// wake on its tick; an awaited reservation wakes it, the totals covering
// its event release it, and the loop sleeps again.
func TestTrackerSleepsWhenIdle(t *testing.T) {
	e := startEnv(t)
	var reads atomic.Int64 // the watch loop reads the clock on every tick
	tr := runTracker(t, e, TrackerOptions{Now: func() time.Time { reads.Add(1); return time.Now() }})
	idle := func(when string) {
		t.Helper()
		time.Sleep(100 * time.Millisecond)
		before := reads.Load()
		time.Sleep(300 * time.Millisecond) // 6 ticks of 50 ms
		if n := reads.Load() - before; n > 0 {
			t.Errorf("%s: the idle watch loop read the clock %d times in 300 ms, want 0", when, n)
		}
	}
	idle("before any reservation")
	dept := TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodTotal}
	reserved := func() int64 { _, r, _ := tr.Spend(dept); return r }
	r := tr.Bind(Scopes{Dept: "eng"}).Reserve(100)
	tr.Await("ev-1", r)
	seq := e.publish(t, ev{at: time.Now(), dept: "eng", costNano: 100})
	tr.OnAck("ev-1", seq)
	if got := reserved(); got != 100 {
		t.Fatalf("reserved %d, want 100 until the totals cover the event", got)
	}
	run(t, newConsumer(t, e.js, ConsumerOptions{}))
	testkit.Wait(t, 5*time.Second, "the condition", func() bool { return reserved() == 0 })
	idle("after the reservation went")
}
