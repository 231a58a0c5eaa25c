package usage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

const (
	// minBackoff and maxBackoff bound the pause after a failed publish
	// before publishing (or draining the spool) is tried again.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// maxTick is the longest pause between checks for ack timeouts,
	// reconnection and fsync.
	maxTick = 50 * time.Millisecond
	// maxSubjects caps the cache of per-department subjects (legacy
	// records only).
	maxSubjects = 4096
)

// errAckTimeout marks a publish whose ack did not come within AckTimeout.
var errAckTimeout = errors.New("usage publish ack timeout")

// flight is one publish awaiting its ack: a batch, or a legacy
// single-event record drained from an old spool (head.seq 0).
type flight struct {
	token    uint64 // of its reply subject (see ackSub)
	done     bool   // its ack came: seq, or err
	seq      uint64
	err      error
	deadline time.Time
	b        batch
	gen      uint64   // drain read it belongs to; 0 for batches sent from memory
	end      spoolPos // spool position after its record (drain only)
}

// ring is a fixed-capacity FIFO of flights, in publish order.
type ring struct {
	buf     []flight
	head, n int
}

func (q *ring) len() int { return q.n }

func (q *ring) push(f flight) {
	q.buf[(q.head+q.n)%len(q.buf)] = f
	q.n++
}

func (q *ring) at(i int) *flight { return &q.buf[(q.head+i)%len(q.buf)] }

func (q *ring) front() *flight {
	if q.n == 0 {
		return nil
	}
	return &q.buf[q.head]
}

func (q *ring) pop() flight {
	f := q.buf[q.head]
	q.buf[q.head] = flight{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return f
}

// drainState tracks the one read of spooled records in flight.
type drainState struct {
	active   bool
	gen      uint64
	left     int      // publishes of the read not yet acked
	next     spoolPos // position after the read's last record
	commitTo spoolPos // position up to which everything was acked
	lastSeq  uint64   // seq of the last batch acked, in spool order
	topSeq   uint64   // seq of the read's last batch
}

// runState is the state owned by the goroutine running the loop.
//
// Order. Batches get their seqs in the order their events were taken, are
// published from memory in seq order, and reach the spool in seq order: a
// batch whose publish failed is older than every batch still in flight
// from memory (the ring settles front first), and a new batch is not
// spooled while batches from memory are in flight (it waits, and its
// events wait in the queue, until they are acked or spooled, at most
// AckTimeout). So the spool drains in seq order, and the oldest unacked
// batch is the first one in flight, or else the oldest one in the spool.
type runState struct {
	p     *Publisher
	cfg   Config
	spool *spool
	num   *numbering

	ring     ring
	live     int                   // flights in the ring sent from memory
	backlog  []batch               // batches neither NATS nor the spool could take yet, by seq
	batch    []*usagev1.UsageEvent // the events of the batch being formed
	over     []*usagev1.UsageEvent // the overflow list, taken
	body     []byte                // the events of batch, encoded
	buf      []byte                // a whole batch, encoded
	zbuf     []byte                // buf compressed (seal)
	subjects map[string]string
	acks     ackSub
	msg      nats.Msg // reused for every publish, with msgID as its Nats-Msg-Id
	msgID    []string
	tick     time.Duration
	gather   *time.Timer // ends a gatherQueued wait no event ended
	lastTake time.Time   // when the last event was taken from the queue

	// spoolLow is at most the seq of the oldest batch in the spool (0: no
	// batch known there).
	spoolLow uint64

	now      time.Time
	up       bool      // connected and not backing off
	retryAt  time.Time // no publishing before this
	backoff  time.Duration
	degraded bool // logged that events are being spooled
	lastSync time.Time

	drain drainState
	gen   uint64

	stopping bool
	stop     context.Context
	closeErr error
}

func (r *runState) init(p *Publisher) error {
	r.p, r.cfg, r.spool, r.num = p, p.cfg, p.spool, p.num
	r.ring.buf = make([]flight, p.cfg.MaxPending)
	r.subjects = make(map[string]string)
	// Room for an ack per flight, and as many late ones.
	if err := r.acks.open(p.nc, 2*p.cfg.MaxPending); err != nil {
		return err
	}
	// The Nats-Msg-Id header is set here rather than with WithMsgID, which
	// would allocate a header map and an option per publish.
	r.msgID = make([]string, 1)
	r.msg.Header = nats.Header{jetstream.MsgIDHeader: r.msgID}
	r.spoolLow = p.spoolLow
	r.tick = min(p.cfg.SyncInterval, maxTick)
	r.gather = time.NewTimer(time.Hour)
	r.gather.Stop()
	return nil
}

// loop is the body of Run (stop nil) and of a Close without Run (stop set).
func (r *runState) loop(ctx, stop context.Context) error {
	if stop != nil {
		r.beginStop(stop)
	}
	tick := time.NewTicker(r.tick)
	defer tick.Stop()
	r.lastSync = r.cfg.Clock()
	for {
		r.step()
		if r.stopping && (r.stop.Err() != nil || r.idle() || r.stuck()) {
			break
		}
		var tc <-chan time.Time
		// idle is set before due looks at the Begin queue: a Begin
		// queued after that look sees it and wakes this loop.
		r.p.idle.Store(true)
		if r.due() {
			r.p.idle.Store(false)
			tc = tick.C
		}
		r.wait(ctx, tc)
		r.p.idle.Store(false)
	}
	return r.finish()
}

// due reports whether anything waits on the clock: acks (their timeout),
// the spool (records to drain, bytes not yet on disk), held batches, NATS
// down or a publish backoff. Otherwise the loop waits without its tick (a
// ticker no one waits on does not fire), so an idle publisher does not wake
// 20 times a second; an event, an ack or a stop request wakes it.
func (r *runState) due() bool {
	return r.ring.len() > 0 || !r.up || len(r.backlog) > 0 || r.drain.active ||
		r.spool.hasData() || r.spool.unsynced() ||
		len(r.p.jch) > 0 || len(r.p.journal.pending) > 0 || r.p.journal.dirty
}

// step does the work that needs no waiting: place held batches, start a
// drain read, move the overflow list to the spool, write spooled bytes.
func (r *runState) step() {
	r.takeBegun()
	r.refresh()
	r.placeBacklog()
	if !r.stopping {
		r.startDrain()
	}
	if len(r.backlog) == 0 && (r.canTake() || !r.p.spoolFull.Load()) {
		// Enqueue found the queue full: these go to the spool, behind
		// whatever the queue holds.
		r.over = r.p.takeOverflow(r.over[:0])
		for _, ev := range r.over {
			r.add(ev, true)
		}
		r.form(true)
		clear(r.over)
	}
	r.flushSpool()
	r.flushJournal()
}

// takeBegun moves the Begin and Progress values queued so far into the
// journal. It runs before any event is taken, so the Begin of a request,
// which happened before its event's Enqueue, is tracked before that event
// closes it.
func (r *runState) takeBegun() {
	p := r.p
	p.jwoken.Store(false)
	for {
		select {
		case e := <-p.jch:
			if e.kind == kindProgress {
				p.journal.progress(e.b.EventID, e.tokens)
			} else if p.journal.begin(&e.b) {
				p.begun.Add(1)
			} else {
				p.begunDropped.Add(1)
			}
		default:
			return
		}
	}
}

// flushJournal writes the journal's records, after the spool's bytes.
func (r *runState) flushJournal() {
	if err := r.p.journal.flush(r.now); err != nil {
		r.p.log.Error("usage begun file write", "err", err)
	}
}

// closeEvents closes the journal's record of each event placed. The Begin
// of each was queued before its event (the gateway's request calls Begin,
// then Enqueue), so taking the queued values first tracks every one of
// them, however many events were taken since the last take.
func (r *runState) closeEvents(evs []*usagev1.UsageEvent) {
	r.takeBegun()
	j := r.p.journal
	if len(j.open) == 0 {
		return
	}
	for _, ev := range evs {
		j.done(ev.GetEventId())
	}
}

// wait blocks until one thing happens (an event, an ack, a tick, a stop
// request) and handles it.
func (r *runState) wait(ctx context.Context, tick <-chan time.Time) {
	var in chan *usagev1.UsageEvent
	if r.canTake() {
		in = r.p.ch
	}
	var closec chan context.Context
	var stopc <-chan struct{}
	if r.stopping {
		stopc = r.stop.Done()
	} else {
		closec = r.p.closeReq
	}
	select {
	case <-ctx.Done():
		r.beginStop(ctx)
	case c := <-closec:
		r.beginStop(c)
	case <-stopc:
	case ev := <-in:
		r.take(ev)
	case m := <-r.acks.ch:
		r.onAck(m)
		r.settleReady()
	case <-r.p.wake:
	case <-tick:
		r.onTick()
	}
}

func (r *runState) beginStop(ctx context.Context) {
	r.stopping, r.stop = true, ctx
	r.p.shut()
}

// idle reports whether nothing is left in memory or in flight.
func (r *runState) idle() bool {
	return len(r.p.ch) == 0 && r.p.overLen.Load() == 0 && len(r.backlog) == 0 && r.ring.len() == 0
}

// stuck reports whether, while stopping, the events left in memory can
// never be placed: NATS is down, the spool is full, and nothing is in
// flight whose ack could change that (the spool is not drained during a
// stop). finish then counts them as dropped rather than wait forever.
func (r *runState) stuck() bool {
	return r.ring.len() == 0 && !r.canTake() && !r.idle()
}

// refresh reads the clock and the connection state. While stopping, a
// publish backoff is ignored: Close should not spool what NATS can take.
func (r *runState) refresh() {
	r.now = r.cfg.Clock()
	r.up = r.p.nc.IsConnected() && (r.stopping || !r.now.Before(r.retryAt))
}

// spooling reports whether new batches must go to the spool: NATS is down
// or backing off, or the spool holds older batches that must go first.
func (r *runState) spooling() bool {
	return !r.up || r.spool.hasData()
}

// canTake reports whether a batch formed from the queue can be placed now.
// When it cannot, events stay queued and Enqueue sees the queue fill up.
func (r *runState) canTake() bool {
	if len(r.backlog) > 0 {
		return false
	}
	room := r.ring.len() < r.cfg.MaxPending
	if r.spooling() {
		return (!r.p.spoolFull.Load() && r.live == 0) || (r.up && room)
	}
	return room
}

// take forms a batch from ev, taken from the queue, and the events queued
// behind it, up to BatchSize events. While events come less than
// FlushDelay apart and go straight to NATS, it first holds the batch open
// (gatherQueued) so that one publish carries them all; an event after a
// quiet spell is published at once.
func (r *runState) take(ev *usagev1.UsageEvent) {
	r.takeBegun()
	r.refresh() // the connection may have dropped while we waited
	busy := r.cfg.FlushDelay > 0 && r.now.Sub(r.lastTake) < r.cfg.FlushDelay
	r.lastTake = r.now
	r.add(ev, false)
	if busy && !r.stopping && !r.spooling() && len(r.backlog) == 0 {
		r.gatherQueued(r.cfg.BatchSize - 1)
		r.refresh()
		r.lastTake = r.now
	} else {
		r.takeQueued(r.cfg.BatchSize - 1)
	}
	r.form(false)
}

// gatherQueued adds up to n events, queued or arriving, until the queue
// holds a whole batch or an event comes that ended FlushDelay after the
// batch's first was taken (Enqueue wakes it for either), or twice
// FlushDelay has passed. It sleeps meanwhile and then takes what queued
// up, rather than receive each event as it arrives: a receive per event
// would wake this goroutine once per request, which costs the gateway more
// CPU than the batch saves. While events keep coming, one of them ends the
// wait, in the wake-up its request already caused: the timer, which would
// wake an idle gateway once per batch (and the runtime's poller once more,
// as it sleeps in whole milliseconds), fires only when none comes. A stop
// request or an ack waits meanwhile, at most twice FlushDelay.
func (r *runState) gatherQueued(n int) {
	n -= r.takeQueued(n)
	if n <= 0 {
		return
	}
	select { // a wake-up left from a batch already taken
	case <-r.p.batchFull:
	default:
	}
	r.p.batchWant.Store(int64(n))
	r.p.gatherUntil.Store(r.now.Add(r.cfg.FlushDelay).UnixNano())
	if len(r.p.ch) < n { // else Enqueue may have looked before the Store
		r.gather.Reset(2 * r.cfg.FlushDelay)
		select {
		case <-r.gather.C:
		case <-r.p.batchFull:
		}
	}
	r.p.gatherUntil.Store(math.MaxInt64)
	r.p.batchWant.Store(math.MaxInt64)
	r.takeQueued(n)
}

// takeQueued adds up to n of the events waiting in the queue, and returns
// how many it took. It stops early when the queue is empty or a batch
// formed on the way could not be placed.
func (r *runState) takeQueued(n int) int {
	took := 0
	for took < n && len(r.backlog) == 0 {
		select {
		case ev := <-r.p.ch:
			r.add(ev, false)
			took++
		default:
			return took
		}
	}
	return took
}

// add appends ev to the batch being formed, forming the batch first when
// ev would take it over BatchBytes.
func (r *runState) add(ev *usagev1.UsageEvent, spool bool) {
	size := ev.SizeVT()
	if len(r.batch) > 0 && maxBatchHead+len(r.body)+eventSize(size) > r.cfg.BatchBytes {
		r.form(spool)
	}
	body, err := appendEvent(r.body, ev, size)
	if err != nil {
		r.p.dropped.Add(1)
		r.p.log.Error("usage event dropped: cannot marshal", "event_id", ev.GetEventId(), "err", err)
		return
	}
	r.body = body
	r.batch = append(r.batch, ev)
	if len(r.batch) >= r.cfg.BatchSize {
		r.form(spool)
	}
}

// form numbers the batch being formed and places it: published, spooled
// (always, with spool set), or held in the backlog.
func (r *runState) form(spool bool) {
	if len(r.batch) == 0 {
		return
	}
	seq, resumed, err := r.num.next()
	if err != nil {
		r.p.log.Error("usage batch seq not persisted: a restart may reuse seqs", "seq", seq, "err", err)
	}
	r.p.lastSeq.Store(seq)
	b := batch{
		head:   batchHead{seq: seq, createdMs: r.cfg.Clock().UnixMilli(), resumed: resumed},
		events: slices.Clone(r.batch),
	}
	clear(r.batch)
	r.batch = r.batch[:0]
	r.buf = append(appendBatchHead(r.buf[:0], r.num.id, b.head), r.body...)
	r.body = r.body[:0]
	// Behind a held batch, a new one waits too, to keep the order.
	if len(r.backlog) > 0 || !r.place(&b, r.seal(r.buf), spool || r.spooling()) {
		r.backlog = append(r.backlog, b)
	}
}

// encode returns b's message as written to the stream and the spool.
func (r *runState) encode(b *batch) []byte {
	data, bad := appendBatch(r.buf[:0], r.num.id, b)
	r.buf = data
	if bad > 0 {
		r.p.dropped.Add(int64(bad))
	}
	return r.seal(data)
}

// seal returns the message of a batch encoded as data: data itself, or its
// compressed form in r.zbuf (Config.Compression).
func (r *runState) seal(data []byte) []byte {
	if r.cfg.Compression == CompressionNone {
		return data
	}
	r.zbuf = Compress(r.zbuf[:0], data)
	return r.zbuf
}

// place publishes b (encoded as data) from memory, or, when spool is set
// or the publish fails, appends it to the spool. A full spool does not
// stop a batch from being published when NATS is up. It returns false when
// b could be placed nowhere.
func (r *runState) place(b *batch, data []byte, spool bool) bool {
	n := int64(len(b.events))
	room := r.room(b.head.seq)
	if !spool && room && r.publishLive(b, data) {
		return true
	}
	if r.mayAppend(b.head.seq) {
		switch err := r.spool.append(data); {
		case err == nil:
			r.spooledBatch(b)
			return true
		case errors.Is(err, errSpoolFull):
			r.p.spoolFull.Store(true)
		default:
			r.p.dropped.Add(n)
			r.p.batchesDropped.Add(1)
			r.p.log.Error("usage batch dropped: cannot spool", "seq", b.head.seq, "events", n, "err", err)
			return true
		}
	}
	return r.up && room && r.publishLive(b, data)
}

func (r *runState) spooledBatch(b *batch) {
	r.closeEvents(b.events)
	r.p.spooled.Add(int64(len(b.events)))
	r.p.batchesSpooled.Add(1)
	if r.spoolLow == 0 || b.head.seq < r.spoolLow {
		r.spoolLow = b.head.seq
	}
}

// mayAppend reports whether batch seq may go to the spool now without
// breaking its seq order: no older batch is in flight from memory.
func (r *runState) mayAppend(seq uint64) bool {
	if r.live == 0 {
		return true
	}
	for i := range r.ring.len() {
		if f := r.ring.at(i); f.gen == 0 {
			return seq < f.b.head.seq
		}
	}
	return true
}

// room reports whether batch seq may be published now: a slot is free,
// and seq is below the oldest unacked batch's seq + WindowSize, so that
// consumers never see a producer's batches further out of order than
// their Window can tell apart.
func (r *runState) room(seq uint64) bool {
	if r.ring.len() >= r.cfg.MaxPending {
		return false
	}
	low := r.ringLow()
	if r.spool.hasData() && r.spoolLow != 0 && (low == 0 || r.spoolLow < low) {
		low = r.spoolLow
	}
	return low == 0 || seq < low+WindowSize
}

// ringLow is the seq of the first batch in flight, or 0.
func (r *runState) ringLow() uint64 {
	for i := range r.ring.len() {
		if s := r.ring.at(i).b.head.seq; s != 0 {
			return s
		}
	}
	return 0
}

func (r *runState) placeBacklog() {
	n := 0
	for n < len(r.backlog) {
		b := &r.backlog[n]
		if !r.place(b, r.encode(b), r.spooling()) {
			break
		}
		n++
	}
	if n == 0 {
		return
	}
	rest := copy(r.backlog, r.backlog[n:])
	clear(r.backlog[rest:])
	r.backlog = r.backlog[:rest]
}

// hold puts b in the backlog at its place in seq order.
func (r *runState) hold(b batch) {
	i, _ := slices.BinarySearchFunc(r.backlog, b.head.seq, func(x batch, seq uint64) int {
		switch {
		case x.head.seq < seq:
			return -1
		case x.head.seq > seq:
			return 1
		}
		return 0
	})
	r.backlog = slices.Insert(r.backlog, i, b)
}

func (r *runState) publishLive(b *batch, data []byte) bool {
	r.msg.Subject, r.msg.Data = BatchSubject(r.num.id), data
	r.msgID[0] = BatchMsgID(r.num.id, b.head.seq)
	token, err := r.send()
	if err != nil {
		r.p.failed.Add(int64(len(b.events)))
		r.p.batchesFailed.Add(1)
		r.markFailure(err)
		return false
	}
	r.ring.push(flight{b: *b, token: token, deadline: r.now.Add(r.cfg.AckTimeout)})
	r.live++
	r.closeEvents(b.events)
	r.p.pending.Store(int64(r.ring.len()))
	return true
}

// publishRecord sends one spooled record as it is: a batch on its
// producer's subject, a legacy event on its department's subject with its
// event id as Nats-Msg-Id, as before batches existed. The client copies
// data before returning, so the caller may reuse it.
func (r *runState) publishRecord(b *usagev1.UsageBatch, data []byte) (uint64, error) {
	if b.ProducerId == "" {
		ev := b.Events[0]
		r.msg.Subject = r.subject(ev.GetDept())
		r.msgID[0] = ev.GetEventId()
	} else {
		r.msg.Subject = BatchSubject(b.ProducerId)
		r.msgID[0] = BatchMsgID(b.ProducerId, b.Seq)
	}
	r.msg.Data = data
	return r.send()
}

// send publishes r.msg with a reply subject of its own and returns its
// token. A token is used up only by a publish that was sent, and each
// one sent becomes a flight, so the flights in the ring carry consecutive
// tokens. The client copies the message into its buffer before returning.
// No retries inside the client: the spool retries.
func (r *runState) send() (uint64, error) {
	token := r.acks.next + 1
	r.msg.Reply = r.acks.replyTo(token)
	err := r.p.nc.PublishMsg(&r.msg)
	r.msg.Reply = ""
	if err != nil {
		return 0, err
	}
	r.acks.next = token
	return token, nil
}

// onAck records the ack m on its flight, when that is still in the ring:
// the flight as far from the front as its token from the front's (see
// send).
func (r *runState) onAck(m *nats.Msg) {
	token, ok := r.acks.token(m)
	front := r.ring.front()
	if !ok || front == nil || token < front.token || token-front.token >= uint64(r.ring.len()) {
		return // late, or no reply of ours
	}
	f := r.ring.at(int(token - front.token))
	if f.token != token || f.done {
		return
	}
	f.seq, f.err = parseAck(m)
	f.done = true
}

// takeAcks records the acks that have come, without waiting.
func (r *runState) takeAcks() {
	for {
		select {
		case m := <-r.acks.ch:
			r.onAck(m)
		default:
			return
		}
	}
}

func (r *runState) subject(dept string) string {
	if s, ok := r.subjects[dept]; ok {
		return s
	}
	s := Subject(dept)
	if len(r.subjects) < maxSubjects {
		r.subjects[dept] = s
	}
	return s
}

// markFailure starts (or lengthens) a pause in publishing: batches are
// spooled until it ends, then the spool is drained.
func (r *runState) markFailure(err error) {
	r.up = false
	if r.now.Before(r.retryAt) {
		return // already backing off
	}
	r.backoff = min(max(2*r.backoff, minBackoff), maxBackoff)
	r.retryAt = r.now.Add(r.backoff)
	if !r.degraded {
		r.degraded = true
		r.p.log.Warn("usage publish failing, spooling events", "err", err, "spool_dir", r.cfg.SpoolDir)
	}
}

// settleReady settles the flights at the front whose outcome is known.
func (r *runState) settleReady() {
	for f := r.ring.front(); f != nil && f.done; f = r.ring.front() {
		r.settle(r.ring.pop())
	}
}

// expire fails the flights at the front whose ack is overdue.
func (r *runState) expire() {
	now := r.cfg.Clock()
	for f := r.ring.front(); f != nil && now.After(f.deadline); f = r.ring.front() {
		f := r.ring.pop()
		f.seq, f.err = 0, errAckTimeout
		r.settle(f)
	}
}

// settle handles the outcome of one publish (f.seq, or f.err), taken from
// the front of the ring. A failed batch is spooled whole, with its seq, to be published
// again later: consumers drop it if the first publish did reach the
// stream.
func (r *runState) settle(f flight) {
	p := r.p
	p.pending.Store(int64(r.ring.len()))
	if f.gen != 0 {
		r.settleDrain(f)
		return
	}
	r.live--
	if err := f.err; err != nil {
		p.failed.Add(int64(len(f.b.events)))
		p.batchesFailed.Add(1)
		r.markFailure(err)
		if !r.place(&f.b, r.encode(&f.b), true) {
			r.hold(f.b)
		}
		return
	}
	p.published.Add(int64(len(f.b.events)))
	p.batchesPublished.Add(1)
	r.backoff = 0
	r.acked(f.b.events, f.seq)
	// In the stream and reported: nothing reads these events again (a
	// batch is published live once; one that failed went to the spool,
	// whose drain decodes events of its own), so they go back to the
	// message pool the gateway takes its next events from.
	for _, ev := range f.b.events {
		ev.ReturnToVTPool()
	}
}

// acked reports each event of an acked message to OnAck.
func (r *runState) acked(evs []*usagev1.UsageEvent, seq uint64) {
	if r.cfg.OnAck == nil {
		return
	}
	for _, ev := range evs {
		r.cfg.OnAck(ev.GetEventId(), seq)
	}
}

func (r *runState) settleDrain(f flight) {
	d := &r.drain
	if !d.active || f.gen != d.gen {
		return // from an abandoned read: its records are read again
	}
	if err := f.err; err != nil {
		r.p.failed.Add(int64(len(f.b.events)))
		r.p.batchesFailed.Add(1)
		r.markFailure(err)
		r.endDrain()
		return
	}
	r.p.drained.Add(int64(len(f.b.events)))
	r.p.batchesDrained.Add(1)
	r.backoff = 0
	r.acked(f.b.events, f.seq)
	if f.b.head.seq != 0 {
		d.lastSeq = f.b.head.seq
	}
	d.left--
	d.commitTo = f.end
	if d.left == 0 {
		d.commitTo = d.next
		r.endDrain()
	}
}

// startDrain publishes the next read of spooled records when NATS is up
// and no read is in flight. It stops a read early at a batch the window
// does not allow yet.
func (r *runState) startDrain() {
	if r.drain.active || !r.up || !r.spool.hasData() {
		return
	}
	// A read fills the publish window (up to the spool's read chunk): one
	// read is in flight at a time, so small reads would make draining a
	// long outage slow.
	room := r.cfg.MaxPending - r.ring.len()
	if room <= 0 {
		return
	}
	recs, next, err := r.spool.read(room)
	if err != nil {
		r.p.log.Error("usage spool read", "err", err)
		r.markFailure(err)
		return
	}
	r.gen++
	r.drain = drainState{active: true, gen: r.gen, next: next, commitTo: r.spool.rpos}
	d := &r.drain
	low := r.ringLow()
	for _, rec := range recs {
		b := new(usagev1.UsageBatch)
		if err := DecodeMessage(rec.payload, b); err != nil {
			// Intact on disk yet not a batch: set it aside like a corrupt record.
			if err := r.spool.moveBad(rec.start.seg, rec.payload); err != nil {
				r.p.log.Error("usage spool", "err", err)
			}
			r.spool.corrupt.Add(1)
			continue
		}
		if b.Seq != 0 {
			if low == 0 {
				low = b.Seq
			}
			if b.Seq >= low+WindowSize {
				d.next = rec.start // held back until the older ones are acked
				break
			}
		}
		token, err := r.publishRecord(b, rec.payload)
		if err != nil {
			r.p.failed.Add(int64(len(b.Events)))
			r.p.batchesFailed.Add(1)
			r.markFailure(err)
			d.next = rec.start
			break
		}
		fb := batch{head: batchHead{seq: b.Seq}, events: b.Events}
		r.ring.push(flight{b: fb, token: token, deadline: r.now.Add(r.cfg.AckTimeout), gen: d.gen, end: rec.end})
		d.left++
		d.topSeq = max(d.topSeq, b.Seq)
	}
	r.p.pending.Store(int64(r.ring.len()))
	if d.left == 0 {
		d.commitTo = d.next
		r.endDrain()
	}
}

// endDrain closes the drain read, committing the spool position up to
// which every record was published.
func (r *runState) endDrain() {
	d := &r.drain
	d.active = false
	if d.lastSeq != 0 {
		// The spool is in seq order: what is left there comes after.
		r.spoolLow = max(r.spoolLow, d.lastSeq+1)
	}
	if d.commitTo == r.spool.rpos {
		return
	}
	disk := r.spool.disk
	if err := r.spool.commit(d.commitTo); err != nil {
		r.p.log.Error("usage spool commit", "err", err)
	}
	if r.spool.disk < disk {
		r.p.spoolFull.Store(false)
	}
	if !r.spool.hasData() {
		r.spoolLow = 0
		if r.degraded {
			r.degraded = false
			r.p.log.Info("usage spool drained, publishing directly")
		}
	}
}

func (r *runState) flushSpool() {
	if err := r.spool.flush(); err != nil {
		r.p.log.Error("usage spool write, events lost", "err", err)
	}
}

func (r *runState) onTick() {
	r.expire()
	now := r.cfg.Clock()
	if now.Sub(r.lastSync) >= r.cfg.SyncInterval {
		r.lastSync = now
		if err := r.spool.sync(); err != nil {
			r.p.log.Error("usage spool sync", "err", err)
		}
		if err := r.p.journal.sync(); err != nil {
			r.p.log.Error("usage begun file sync", "err", err)
		}
	}
}

// finish writes everything still in memory to the spool, in seq order,
// and closes it. Batches still awaiting an ack are spooled too: if they did
// reach the stream, consumers drop the republished copy by its seq.
func (r *runState) finish() error {
	p := r.p
	r.stopping = true
	p.shut()
	r.takeBegun()
	r.takeAcks()
	r.settleReady()
	if r.drain.active {
		r.endDrain() // keep what was acked; the rest is read again next time
	}
	var lost int64
	keep := func(b *batch) {
		err := r.spool.append(r.encode(b))
		if err != nil {
			lost += int64(len(b.events))
			p.dropped.Add(int64(len(b.events)))
			p.batchesDropped.Add(1)
			return
		}
		r.spooledBatch(b)
	}
	for r.ring.len() > 0 {
		if f := r.ring.pop(); f.gen == 0 {
			keep(&f.b)
		}
	}
	r.live = 0
	r.up = false // nothing more is sent: what is left goes to the spool
	p.pending.Store(0)
	for i := range r.backlog {
		keep(&r.backlog[i])
	}
	clear(r.backlog)
	r.backlog = r.backlog[:0]
	// Whatever is left in memory forms new batches, straight to the spool
	// (the backlog is empty and nothing is in flight, so add and form
	// append them).
	for len(p.ch) > 0 {
		r.add(<-p.ch, true)
	}
	for _, ev := range p.takeOverflow(r.over[:0]) {
		r.add(ev, true)
	}
	r.form(true)
	for _, b := range r.backlog { // the spool was full
		lost += int64(len(b.events))
		p.dropped.Add(int64(len(b.events)))
		p.batchesDropped.Add(1)
	}
	r.backlog = nil
	if lost > 0 {
		p.log.Error("usage events dropped at shutdown: spool full or failing", "events", lost)
	}
	r.acks.close()
	// The spool first: a done record never reaches the disk before the
	// event it closes.
	r.closeErr = errors.Join(r.spool.close(), p.journal.close(), r.num.close())
	if r.closeErr != nil {
		r.closeErr = fmt.Errorf("close usage publisher: %w", r.closeErr)
	}
	return r.closeErr
}
