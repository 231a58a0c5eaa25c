package budget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/kvwatch"
)

// Leases make a limit hold across any number of gateways (issue #13).
//
// LeaseBucket has one entry per limited total, a leaseRecord written only
// by compare-and-set: every gateway's slice with its expiry, and Floor,
// the largest applied spend any writer saw. A gateway admits a request
// when its spend charged to its slice still fits (a few atomic loads, no
// network); in the background, and when a request does not fit, it
// refills with one CAS that keeps Floor plus every unexpired slice within
// the limit. A request that does not fit waits at most RefillWait
// (FirstGrantWait for a first grant), then is refused. The grant rule, the
// order of reads in casOnce, the proof that total spend stays within the
// limit (up to settle excess) and what breaks the bound are in
// docs/design/budgets.md, "Leases".

// LeaseBucket is the KV bucket of budget leases, one key per limited total
// (the spend total's key); each value is a JSON leaseRecord.
const LeaseBucket = "tollgate_budget_leases"

// LeaseOptions configure leases (TrackerOptions.Leases). Zero values take
// the defaults shown.
type LeaseOptions struct {
	// ID names this gateway in the leases bucket. Default: random, new at
	// every start.
	ID string
	// TTL is how long a slice stays valid without a renewal: a dead
	// gateway's slices come back to the others after it. Renewed by every
	// refill, and at least every TTL/3. Default 30s.
	TTL time.Duration
	// MaxSlice caps the room one refill grants, in nano-USD. Default 0: no
	// cap (one gateway alone holds the whole remaining headroom).
	MaxSlice int64
	// RefillWait bounds how long a request that does not fit the slice
	// waits for a refill before it is refused. Default 50ms.
	RefillWait time.Duration
	// FirstGrantWait bounds the wait of the first request on a total that
	// this gateway holds no slice of yet. Default 1s.
	FirstGrantWait time.Duration
	// Logger logs lease writes that fail. Default: discard.
	Logger *slog.Logger
}

// Lease defaults (LeaseOptions).
const (
	DefaultLeaseTTL       = 30 * time.Second
	DefaultRefillWait     = 50 * time.Millisecond
	DefaultFirstGrantWait = time.Second
)

func (o *LeaseOptions) setDefaults() {
	if o.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.ID = hex.EncodeToString(b[:])
	}
	if o.TTL <= 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.RefillWait <= 0 {
		o.RefillWait = DefaultRefillWait
	}
	if o.FirstGrantWait <= 0 {
		o.FirstGrantWait = DefaultFirstGrantWait
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// LeaseOptionsFrom returns the lease options of the config's
// budget.leases section, or nil when leases are disabled.
func LeaseOptionsFrom(c config.BudgetLeases, log *slog.Logger) (*LeaseOptions, error) {
	if c.Disabled {
		return nil, nil
	}
	o := &LeaseOptions{TTL: c.TTL, RefillWait: c.RefillWait, FirstGrantWait: c.FirstGrantWait, Logger: log}
	if c.MaxSliceUSD != "" {
		n, err := parseUSD(c.MaxSliceUSD)
		if err != nil {
			return nil, fmt.Errorf("budget.leases.max_slice_usd: %w", err)
		}
		o.MaxSlice = n
	}
	return o, nil
}

// EnsureLeaseBucket creates the leases bucket, or updates its
// configuration. Entries not rewritten within 4 x ttl (no gateway holds a
// slice of that total any more) age out.
func EnsureLeaseBucket(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (jetstream.KeyValue, error) {
	if replicas <= 0 {
		replicas = 1
	}
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      LeaseBucket,
		Description: "Tollgate budget leases: each gateway's slice of a limited total",
		History:     1,
		TTL:         4 * ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", LeaseBucket, err)
	}
	return kv, nil
}

// leaseRecord is one LeaseBucket entry.
type leaseRecord struct {
	// Floor is the largest applied spend any writer saw, nano-USD.
	Floor int64 `json:"floor"`
	// Limit is the limit the last writer checked against (informative).
	Limit   int64             `json:"limit"`
	Holders map[string]holder `json:"holders,omitempty"`
}

// holder is one gateway's slice.
type holder struct {
	Slice int64 `json:"slice"`
	// Want is room the gateway asked for and could not get: others give
	// back all but their share when they see it.
	Want int64 `json:"want,omitempty"`
	// ExpMs is the slice's expiry, unix ms.
	ExpMs int64 `json:"exp_ms"`
}

// leaseView is the last record known for a key and its revision (0: none).
type leaseView struct {
	rev uint64
	rec leaseRecord
	// holders is rec.Holders as a slice (newLeaseView): admission reads
	// the others' slices on every request, and a slice costs no map
	// iteration.
	holders []heldSlice
}

// heldSlice is one holder of a leaseView.
type heldSlice struct {
	id string
	h  holder
}

// newLeaseView returns the view of rec at revision rev.
func newLeaseView(rev uint64, rec leaseRecord) *leaseView {
	v := &leaseView{rev: rev, rec: rec, holders: make([]heldSlice, 0, len(rec.Holders))}
	for id, h := range rec.Holders {
		v.holders = append(v.holders, heldSlice{id, h})
	}
	return v
}

// others sums the unexpired slices of holders other than me and counts
// those active (holding room or wanting it).
func (v *leaseView) others(me string, nowMs int64) (sum int64, active int, want bool) {
	if v == nil {
		return 0, 0, false
	}
	for i := range v.holders {
		id, h := v.holders[i].id, &v.holders[i].h
		if id == me || h.ExpMs <= nowMs {
			continue
		}
		sum += h.Slice
		if h.Slice > 0 || h.Want > 0 {
			active++
		}
		want = want || h.Want > 0
	}
	return sum, active, want
}

// expiredSince reports whether a slice of another holder than me expired
// in (fromMs, toMs].
func (v *leaseView) expiredSince(me string, fromMs, toMs int64) bool {
	for _, hs := range v.holders {
		if hs.id != me && hs.h.ExpMs > fromMs && hs.h.ExpMs <= toMs {
			return true
		}
	}
	return false
}

// lease is this gateway's slice of one limited total.
type lease struct {
	key string
	sl  *slot

	// limit is the smallest limit checked against this total since the
	// limits generation gen (SetLimits bumps it).
	limit atomic.Int64
	gen   atomic.Uint64

	// cap bounds reserved + drained of sl: S_g + base. exp is the slice's
	// expiry (unix ns); after it the slice admits nothing.
	cap atomic.Int64
	exp atomic.Int64
	// granted is true once a first refill succeeded.
	granted atomic.Bool
	// low: the room left under which a refill is started ahead of need.
	low atomic.Int64
	// need is set by a request waiting for room.
	need atomic.Bool
	// lastUse is the unix ns of the last admission on this total.
	lastUse atomic.Int64
	// wake is closed after each refill attempt, for the waiting requests.
	wake atomic.Pointer[chan struct{}]
	view atomic.Pointer[leaseView]

	// idle is set once the slice was given back for want of use.
	idle atomic.Bool
	// shrunkRev is the revision last shrunk for another gateway's want;
	// only the refill loop touches it.
	shrunkRev uint64
	// wrote is this gateway's last write.
	wrote atomic.Pointer[leaseWrite]
}

// leaseWrite is what a gateway's last write of a lease saw.
type leaseWrite struct {
	others int64 // the other gateways' slices
	at     int64 // unix ns
}

// leases is the Tracker's lease state. mu guards byKey and list; the
// counters are atomics.
type leases struct {
	o      LeaseOptions
	ttl    int64 // ns
	kick   chan struct{}
	kicked atomic.Bool // a wake-up is pending on kick
	ready  chan struct{}
	mu     sync.Mutex
	byKey  map[string]*lease
	list   []*lease
	limGen atomic.Uint64

	refills, conflicts, errors, waits, refusedWithRoom atomic.Uint64
	// looks counts the refill loop's passes over the leases.
	looks    atomic.Uint64
	waitHist waitHistogram
}

func newLeases(o LeaseOptions) *leases {
	o.setDefaults()
	return &leases{o: o, ttl: int64(o.TTL), kick: make(chan struct{}, 1), ready: make(chan struct{}),
		byKey: make(map[string]*lease)}
}

// signal wakes the refill loop. Requests call it, so it sends only when no
// wake-up is pending (a channel send takes the channel's lock).
func (ls *leases) signal() {
	if !ls.kicked.CompareAndSwap(false, true) {
		return
	}
	select {
	case ls.kick <- struct{}{}:
	default:
	}
}

// leaseFor returns the lease of slot s (total id) checked against limit l,
// creating it on first use.
func (t *Tracker) leaseFor(s *slot, id *TotalID, l *Limit) *lease {
	ls := t.leases
	le := s.lease.Load()
	if le == nil {
		ls.mu.Lock()
		if le = s.lease.Load(); le == nil {
			key := id.Key()
			le = &lease{key: key, sl: s}
			ch := make(chan struct{})
			le.wake.Store(&ch)
			le.limit.Store(l.AmountNano)
			le.gen.Store(ls.limGen.Load())
			ls.byKey[key] = le
			ls.list = append(ls.list, le)
			s.lease.Store(le)
		}
		ls.mu.Unlock()
	}
	if g := ls.limGen.Load(); le.gen.Load() != g {
		le.limit.Store(l.AmountNano)
		le.gen.Store(g)
	} else if l.AmountNano < le.limit.Load() {
		le.limit.Store(l.AmountNano)
	}
	return le
}

// room is what the slice still admits (negative: over it), or false when
// it admits nothing (no grant yet, or expired).
func (le *lease) room(now int64) (int64, bool) {
	if !le.granted.Load() || now >= le.exp.Load() {
		return 0, false
	}
	return le.cap.Load() - (le.sl.reserved.Load() + le.sl.drained.Load()), true
}

// drawable is the most room a refill could give now: limit minus the
// largest applied spend known, the others' slices and this gateway's
// unapplied spend.
func (le *lease) drawable(me string, limit, now int64) int64 {
	v := le.view.Load()
	floor := le.sl.spend.Load()
	if v != nil {
		floor = max(floor, v.rec.Floor)
	}
	others, _, _ := v.others(me, now/1e6)
	return limit - floor - others - le.sl.reserved.Load()
}

// headroom is what this gateway can admit on the total: what its slice
// still admits, or what it could draw, whichever is more.
func (t *Tracker) leaseHeadroom(le *lease, limit, now int64) int64 {
	r, ok := le.room(now)
	if !ok {
		r = 0
	}
	return max(r, le.drawable(t.leases.o.ID, limit, now))
}

// RunLeases keeps this gateway's slices of the limited totals in kv (the
// leases bucket) until ctx ends: it watches every other gateway's slices,
// refills ahead of need and for waiting requests, renews, and returns idle
// slices. On ctx's end it returns every slice (ReturnLeases, within 5 s)
// and returns nil. It is a no-op returning nil when the Tracker has no
// LeaseOptions.
func (t *Tracker) RunLeases(ctx context.Context, kv jetstream.KeyValue) error {
	ls := t.leases
	if ls == nil {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- kvwatch.Run(wctx, kv, LeaseBucket, ls.ready, t.applyLease, ls.signal)
	}()
	defer func() {
		cancel()
		<-done
	}()
	// The loop runs when kicked (a request short of room or under the
	// low-water mark, another gateway's write) and when the next refill
	// falls due by time (refillAll): a renewal, or the give-back of a slice
	// idle for TTL. It polls every refillTick only while a request waits
	// for room or another gateway wants some, when what it waits for may
	// change without a kick; a gateway serving requests within its slice
	// wakes for its leases once per renewal, not 50 times a second.
	tick := time.NewTimer(refillTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			t.ReturnLeases(rctx, kv)
			rcancel()
			return nil
		case <-ls.kick:
		case <-tick.C:
		}
		ls.kicked.Store(false)
		ls.looks.Add(1)
		tick.Reset(t.refillAll(ctx, kv))
	}
}

// refillTick is how often RunLeases looks at the leases while a request
// waits for room or another gateway wants some.
const refillTick = 20 * time.Millisecond

// LeasesReady is closed once RunLeases has read the leases bucket (at
// once when leases are off).
func (t *Tracker) LeasesReady() <-chan struct{} {
	if t.leases == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return t.leases.ready
}

// applyLease records one watched entry (kvwatch apply).
func (t *Tracker) applyLease(e jetstream.KeyValueEntry, _ bool) bool {
	ls := t.leases
	var v *leaseView
	if e.Operation() == jetstream.KeyValuePut {
		var rec leaseRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return false // not ours to read
		}
		v = newLeaseView(e.Revision(), rec)
	} else {
		v = &leaseView{} // deleted or aged out: the next write creates it
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	le := ls.byKey[e.Key()]
	if le == nil {
		return false // a total not limited here: its first write reads it
	}
	if old := le.view.Load(); old != nil && old.rev >= e.Revision() && v.rev != 0 {
		return false // our own write, stored already
	}
	le.view.Store(v)
	return true
}

// refillAll refills each lease that needs it, and returns how long the
// refill loop may wait for a kick before it looks again. Only the refill
// loop calls it.
//
// The wait ends when the first refill falls due by time: a slice's renewal
// (exp - 2 TTL/3) or its give-back after TTL without use (lastUse + TTL),
// TTL at most (pruneLeases). What else makes a refill due comes with a
// kick: a request under the low-water mark or short of room (fitLease,
// waitRefill), another gateway's write (the watch). Two states change
// without one, so the loop polls every refillTick in them: a request
// waiting for room (a write that could not give it room is retried after
// RefillWait), and another gateway wanting room (this one gives back what
// its slice holds beyond its spend in flight, which shrinks as that spend
// is applied).
func (t *Tracker) refillAll(ctx context.Context, kv jetstream.KeyValue) time.Duration {
	ls := t.leases
	ls.mu.Lock()
	list := ls.list
	ls.mu.Unlock()
	now := t.now().UnixNano()
	due := now + ls.ttl
	for _, le := range list {
		if ctx.Err() != nil {
			return refillTick
		}
		now = t.now().UnixNano()
		if reason := t.refillReason(le, now); reason != refillNone {
			t.refill(ctx, kv, le, reason)
		}
		if le.need.Load() {
			due = min(due, now+int64(refillTick))
			continue
		}
		if !le.granted.Load() || le.idle.Load() {
			continue
		}
		due = min(due, le.lastUse.Load()+ls.ttl+1, le.exp.Load()-2*ls.ttl/3+1)
		if _, _, othersWant := le.view.Load().others(ls.o.ID, now/1e6); othersWant {
			due = min(due, now+int64(refillTick))
		}
	}
	now = t.now().UnixNano()
	t.pruneLeases(now)
	// A refill that failed leaves its lease due: it is tried again a
	// refillTick later, not at once.
	return max(time.Duration(due-now), refillTick)
}

// pruneLeases forgets the leases given back and unused for 10 x TTL
// (totals of past days and months, limits removed), so that the refill
// loop's work stays bounded by the totals in use. A request that looked
// the lease up just before waits for a first grant of a new one.
func (t *Tracker) pruneLeases(now int64) {
	ls := t.leases
	stale := func(le *lease) bool {
		return le.idle.Load() && !le.need.Load() && now-le.lastUse.Load() > 10*ls.ttl && le.sl.reserved.Load() == 0
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	for _, le := range ls.list {
		if stale(le) {
			n++
		}
	}
	if n == 0 {
		return
	}
	keep := make([]*lease, 0, len(ls.list)-n)
	for _, le := range ls.list {
		if !stale(le) {
			keep = append(keep, le)
			continue
		}
		le.sl.lease.CompareAndSwap(le, nil)
		delete(ls.byKey, le.key)
	}
	ls.list = keep
}

type refillKind int

const (
	refillNone   refillKind = iota
	refillGrow              // draw more, or renew
	refillShrink            // give back all but a share: another gateway wants room
	refillReturn            // give back all room
)

// refillReason says whether le needs a refill now: a request waits, the
// room ran low with more to draw, the slice is due for renewal, another
// gateway wants room this one holds, or the slice sits idle.
func (t *Tracker) refillReason(le *lease, now int64) refillKind {
	ls := t.leases
	if !le.granted.Load() {
		if le.need.Load() {
			return refillGrow
		}
		return refillNone
	}
	v := le.view.Load()
	if le.need.Load() {
		// A write that could not give the waiting requests room is not
		// retried until another gateway gave room back, another gateway's
		// slice expired, or RefillWait passed: two starving gateways would
		// otherwise rewrite the entry in turn.
		if w := le.wrote.Load(); w != nil && v != nil && now-w.at < int64(ls.o.RefillWait) && !le.idle.Load() {
			others, _, _ := v.others(ls.o.ID, now/1e6)
			if h := v.rec.Holders[ls.o.ID]; h.Want > 0 && others >= w.others && !v.expiredSince(ls.o.ID, w.at/1e6, now/1e6) {
				return refillNone
			}
		}
		return refillGrow
	}
	if le.idle.Load() {
		return refillNone
	}
	room, _ := le.room(now)
	_, _, othersWant := v.others(ls.o.ID, now/1e6)
	if now-le.lastUse.Load() > ls.ttl {
		return refillReturn
	}
	if now > le.exp.Load()-2*ls.ttl/3 {
		return refillGrow
	}
	if room < le.low.Load() && le.drawable(ls.o.ID, le.limit.Load(), now) > room {
		return refillGrow
	}
	if othersWant && v != nil && v.rev != le.shrunkRev && v.rec.Holders[ls.o.ID].Slice > le.sl.reserved.Load() {
		// This gateway's recorded slice holds more than its spend in
		// flight: unused room, or spend applied since.
		le.shrunkRev = v.rev
		return refillShrink
	}
	return refillNone
}

// refill draws, renews or gives back le's slice with one CAS, retried on
// conflicts. Only the refill loop (and ReturnLeases after it) calls it.
func (t *Tracker) refill(ctx context.Context, kv jetstream.KeyValue, le *lease, kind refillKind) {
	ls := t.leases
	defer func() {
		ch := make(chan struct{})
		old := le.wake.Swap(&ch)
		close(*old)
	}()
	for range 8 {
		ok, err := t.casOnce(ctx, kv, le, kind)
		if ok {
			ls.refills.Add(1)
			return
		}
		if err == nil { // conflict: the view was re-read
			ls.conflicts.Add(1)
			continue
		}
		ls.errors.Add(1)
		ls.o.Logger.Warn("budget lease not written", "total", le.key, "err", err)
		return
	}
}

// casOnce makes one attempt. It reports false with a nil error after a
// conflict, once it has re-read the entry.
//
// Until the write's outcome is known nothing is admitted past X, so this
// gateway's admitted spend not yet applied is at most X - drained, read
// after X is in force (requests waiting for room are not admitted, so they
// are not in it). The new slice is that plus room, and the new cap X +
// room. To draw more, X is the cap: requests go on being admitted while
// the write is in flight. To give room back (kind refillShrink or
// refillReturn), or when another gateway wants room (its share is then
// recomputed), X is frozen at min(cap, reserved + drained), so requests
// needing room wait for the write.
func (t *Tracker) casOnce(ctx context.Context, kv jetstream.KeyValue, le *lease, kind refillKind) (bool, error) {
	ls := t.leases
	me := ls.o.ID
	giveBack := kind == refillReturn
	v := le.view.Load()
	oldCap, hadGrant := le.cap.Load(), le.granted.Load()
	frozen := oldCap
	_, _, othersWant := v.others(me, t.now().UnixNano()/1e6)
	if hadGrant && (kind != refillGrow || othersWant) {
		// A request that read the old cap before the store reserved
		// before it too, so the second read includes it.
		used := func() int64 { return le.sl.reserved.Load() + le.sl.drained.Load() }
		first := min(oldCap, used())
		le.cap.Store(first)
		frozen = min(oldCap, max(first, used()))
	}
	// The order matters: the freeze, then drained, then the applied spend
	// (the proof sketch).
	base := le.sl.drained.Load()
	if !hadGrant {
		frozen = base // nothing admitted on this lease yet
	}
	admitted := max(frozen-base, 0)
	applied := le.sl.spend.Load()
	now := t.now().UnixNano()
	limit := le.limit.Load()
	var rec leaseRecord
	if v != nil {
		rec.Floor = v.rec.Floor
	}
	rec.Floor = max(rec.Floor, applied)
	rec.Limit = limit
	rec.Holders = make(map[string]holder, 4)
	others, active := int64(0), 0
	if v != nil {
		for id, h := range v.rec.Holders {
			if id == me || h.ExpMs <= now/1e6 {
				continue // expired slices are dropped
			}
			rec.Holders[id] = h
			others += h.Slice
			if h.Slice > 0 || h.Want > 0 {
				active++
			}
		}
	}
	free := limit - rec.Floor - others - admitted
	room := int64(0)
	if free > 0 && !giveBack {
		room = free
		if active > 0 {
			room = free / int64(2*(active+1)) // half stays unheld, for whoever needs it first
		}
		if ls.o.MaxSlice > 0 {
			room = min(room, ls.o.MaxSlice)
		}
	}
	// Requests waiting here get the room they need when it is free;
	// what they lack beyond it others give back when they see it.
	waiting := le.sl.reserved.Load() + base - frozen
	if !giveBack && free > 0 {
		room = max(room, min(free, waiting))
	}
	h := holder{Slice: admitted + room, ExpMs: (now + ls.ttl) / 1e6}
	if le.need.Load() && !giveBack && waiting > room {
		h.Want = waiting - room
	}
	if h.Slice > 0 || h.Want > 0 {
		rec.Holders[me] = h
	}
	data, err := json.Marshal(&rec)
	if err != nil {
		if hadGrant {
			le.cap.Store(oldCap)
		}
		return false, err
	}
	var rev uint64
	if v == nil || v.rev == 0 {
		rev, err = kv.Create(ctx, le.key, data)
	} else {
		rev, err = kv.Update(ctx, le.key, data, v.rev)
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || isConflict(err) {
			if hadGrant {
				le.cap.Store(oldCap) // not written: the old slice holds
			}
			return false, t.reread(ctx, kv, le)
		}
		return false, fmt.Errorf("write lease %s: %w", le.key, err) // outcome unknown: the frozen cap stays
	}
	le.view.Store(newLeaseView(rev, rec))
	le.wrote.Store(&leaseWrite{others: others, at: now})
	le.cap.Store(frozen + room)
	le.exp.Store(now + ls.ttl - ls.ttl/10) // stop using it before the others may take it back
	le.low.Store(room / 2)
	le.granted.Store(true)
	le.idle.Store(giveBack)
	if h.Want == 0 {
		le.need.Store(false)
	}
	return true, nil
}

// reread loads le's entry after a conflict.
func (t *Tracker) reread(ctx context.Context, kv jetstream.KeyValue, le *lease) error {
	e, err := kv.Get(ctx, le.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		le.view.Store(&leaseView{})
		return nil
	}
	if err != nil {
		return fmt.Errorf("read lease %s: %w", le.key, err)
	}
	var rec leaseRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return fmt.Errorf("decode lease %s: %w", le.key, err)
	}
	le.view.Store(newLeaseView(e.Revision(), rec))
	return nil
}

// ReturnLeases gives back every slice this gateway holds, keeping only its
// spend not applied yet (the slice expires after TTL unless renewed). The
// gateway admits nothing more on a leased total afterwards, until a refill.
// RunLeases calls it when its ctx ends.
func (t *Tracker) ReturnLeases(ctx context.Context, kv jetstream.KeyValue) {
	ls := t.leases
	if ls == nil {
		return
	}
	ls.mu.Lock()
	list := ls.list
	ls.mu.Unlock()
	for _, le := range list {
		if le.granted.Load() {
			le.lastUse.Store(0)
			t.refill(ctx, kv, le, refillReturn)
		}
	}
}

// fitLease reports whether le's slice admits the request already reserved
// on it, and wakes the refill loop when the room left is under the
// low-water mark.
func (t *Tracker) fitLease(le *lease, now int64) bool {
	if now-le.lastUse.Load() > int64(time.Millisecond) {
		le.lastUse.Store(now) // at most once a millisecond: the line is shared
	}
	r, ok := le.room(now)
	if ok && r < le.low.Load() {
		t.leases.signal()
	}
	return ok && r >= 0
}

// waitRefill waits until le's next refill attempt ends, or deadline.
// It reports false once the deadline passed.
func (t *Tracker) waitRefill(ctx context.Context, le *lease, deadline time.Time) bool {
	ch := *le.wake.Load()
	le.need.Store(true)
	t.leases.signal()
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ch:
		return true
	case <-tm.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// LeaseStats are the lease counters since the Tracker started.
type LeaseStats struct {
	// Held is the number of totals this gateway holds a slice with room of.
	Held uint64
	// Refills counts successful lease writes, Conflicts the CAS attempts
	// lost to another writer, Errors the writes that failed otherwise.
	Refills, Conflicts, Errors uint64
	// Waits counts requests that waited for a refill; RefusedWithRoom the
	// requests refused by their gateway's slice while the limit still had
	// room (applied spend plus this gateway's reservations under it).
	Waits, RefusedWithRoom uint64
	// WaitBuckets are cumulative counts of waits at most WaitBounds
	// seconds; WaitSum is the total seconds waited.
	WaitBuckets [len(waitBounds)]uint64
	WaitSum     float64
}

// WaitBounds are the upper bounds, in seconds, of LeaseStats.WaitBuckets.
func WaitBounds() []float64 { return waitBounds[:] }

var waitBounds = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// waitHistogram counts wait durations; its fields are atomics.
type waitHistogram struct {
	buckets [len(waitBounds)]atomic.Uint64
	sumNs   atomic.Int64
}

func (h *waitHistogram) observe(d time.Duration) {
	s := d.Seconds()
	for i, b := range waitBounds {
		if s <= b {
			h.buckets[i].Add(1)
		}
	}
	h.sumNs.Add(int64(d))
}

// LeaseStats returns the lease counters (zero when leases are off).
func (t *Tracker) LeaseStats() LeaseStats {
	var st LeaseStats
	ls := t.leases
	if ls == nil {
		return st
	}
	now := t.now().UnixNano()
	ls.mu.Lock()
	for _, le := range ls.list {
		if r, ok := le.room(now); ok && r > 0 {
			st.Held++
		}
	}
	ls.mu.Unlock()
	st.Refills, st.Conflicts, st.Errors = ls.refills.Load(), ls.conflicts.Load(), ls.errors.Load()
	st.Waits, st.RefusedWithRoom = ls.waits.Load(), ls.refusedWithRoom.Load()
	for i := range st.WaitBuckets {
		st.WaitBuckets[i] = ls.waitHist.buckets[i].Load()
	}
	st.WaitSum = time.Duration(ls.waitHist.sumNs.Load()).Seconds()
	return st
}
