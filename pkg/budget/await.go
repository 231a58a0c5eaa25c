package budget

import (
	"hash/maphash"
	"sync"
	"time"
)

// The lifecycle of a reservation, owned here from start to end:
//
//  1. Reserve, at admission: the request's estimate is added to every total
//     it counts towards.
//  2. Settle, when the request ends: the estimate becomes its actual cost.
//  3. Await(eventID, r), as its usage event is enqueued (Forget undoes it
//     when the event could not be enqueued; the caller then Releases).
//  4. OnAck(eventID, seq), the publisher's hook: the event is in the stream
//     at seq (Published).
//  5. Each total's share is released once that total's as_of_seq covers seq
//     (the watch loop's sweep), or after Grace past the stream-wide
//     watermark.
//
// An event that gets no ack within AckWait went to the publisher's disk
// spool (NATS unreachable): the watch loop releases its reservation, and
// its spend counts once the spool drains (docs/budgets.md: the budget bound).

// DefaultAckWait is TrackerOptions.AckWait's default.
const DefaultAckWait = 2 * time.Minute

const awaitShards = 32

// awaitShard is one slice of the reservations waiting for their event's
// ack; mu guards m.
type awaitShard struct {
	mu sync.Mutex
	m  map[string]awaiting
	_  [40]byte
}

type awaiting struct {
	r  *Reservation
	at int64 // unix ns when the event was enqueued
}

func (t *Tracker) awaitShard(eventID string) *awaitShard {
	return &t.await[maphash.String(t.seed, eventID)%awaitShards]
}

// Await keeps r until the publisher acknowledges the usage event eventID
// (OnAck) or AckWait passes.
func (t *Tracker) Await(eventID string, r *Reservation) {
	s := t.awaitShard(eventID)
	s.mu.Lock()
	s.m[eventID] = awaiting{r: r, at: t.now().UnixNano()}
	s.mu.Unlock()
	t.wakeSweeps()
}

// Forget drops the reservation awaiting eventID and reports whether there
// was one; its owner releases it (the event could not be enqueued).
func (t *Tracker) Forget(eventID string) bool {
	s := t.awaitShard(eventID)
	s.mu.Lock()
	_, ok := s.m[eventID]
	delete(s.m, eventID)
	s.mu.Unlock()
	return ok
}

// OnAck is the usage publisher's hook (usage.Config.OnAck): the event
// eventID is in the stream at seq, so its reservation goes once the spend
// totals include seq. An event without a reservation is ignored.
func (t *Tracker) OnAck(eventID string, seq uint64) {
	s := t.awaitShard(eventID)
	s.mu.Lock()
	a, ok := s.m[eventID]
	delete(s.m, eventID)
	s.mu.Unlock()
	if ok {
		a.r.Published(seq)
	}
}

// Awaiting returns the number of reservations whose event has not been
// acknowledged yet.
func (t *Tracker) Awaiting() int {
	n := 0
	for i := range t.await {
		s := &t.await[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Unacked returns how many reservations were released because their event
// got no ack within AckWait, since the tracker started.
func (t *Tracker) Unacked() uint64 { return t.unacked.Load() }

// sweepUnacked releases the reservations whose event got no ack within
// AckWait. Only the watch loop calls it.
func (t *Tracker) sweepUnacked(now int64) {
	cut := now - t.ackWait
	for i := range t.await {
		s := &t.await[i]
		s.mu.Lock()
		for id, a := range s.m {
			if a.at < cut {
				delete(s.m, id)
				a.r.Release()
				t.unacked.Add(1)
			}
		}
		s.mu.Unlock()
	}
}
