package usage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

const (
	// minBackoff and maxBackoff bound the pause after a failed publish
	// before publishing (or draining the spool) is tried again.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// stallWait bounds how long a publish waits for a free slot when the
	// JetStream context's own max-pending is below Config.MaxPending.
	stallWait = 50 * time.Millisecond
	// maxTick is the longest pause between checks for ack timeouts,
	// reconnection and fsync.
	maxTick = 50 * time.Millisecond
	// maxSubjects caps the cache of per-department subjects.
	maxSubjects = 4096
)

// errAckTimeout marks a publish whose ack did not come within AckTimeout.
var errAckTimeout = errors.New("usage publish ack timeout")

// flight is one publish awaiting its ack.
type flight struct {
	ev       *usagev1.UsageEvent
	fut      jetstream.PubAckFuture
	deadline time.Time
	gen      uint64   // drain batch it belongs to; 0 for events sent from memory
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

// drainState tracks the one batch of spooled events in flight.
type drainState struct {
	active   bool
	gen      uint64
	left     int      // publishes of the batch not yet acked
	next     spoolPos // position after the batch's last record
	commitTo spoolPos // position up to which everything was acked
}

// runState is the state owned by the goroutine running the loop.
type runState struct {
	p     *Publisher
	cfg   Config
	spool *spool

	ring     ring
	backlog  []*usagev1.UsageEvent // events neither NATS nor the spool could take yet
	batch    []*usagev1.UsageEvent
	buf      []byte
	subjects map[string]string
	opts     []jetstream.PublishOpt
	msg      nats.Msg // reused for every publish, with msgID as its Nats-Msg-Id
	msgID    []string
	tick     time.Duration
	gather   *time.Timer // ends a FlushDelay wait
	lastTake time.Time   // when the last event was taken from the queue

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

func (r *runState) init(p *Publisher) {
	r.p, r.cfg, r.spool = p, p.cfg, p.spool
	r.ring.buf = make([]flight, p.cfg.MaxPending)
	r.subjects = make(map[string]string)
	// No retries inside the client: the spool retries, and the client would
	// otherwise keep the message (reused, as is its buffer) for a resend.
	r.opts = []jetstream.PublishOpt{
		jetstream.WithRetryAttempts(0),
		jetstream.WithStallWait(stallWait),
	}
	// The Nats-Msg-Id header is set here rather than with WithMsgID, which
	// would allocate a header map and an option per publish.
	r.msgID = make([]string, 1)
	r.msg.Header = nats.Header{jetstream.MsgIDHeader: r.msgID}
	r.tick = min(p.cfg.SyncInterval, maxTick)
	r.gather = time.NewTimer(time.Hour)
	r.gather.Stop()
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
		r.wait(ctx, tick.C)
	}
	return r.finish()
}

// step does the work that needs no waiting: place held events, start a
// drain batch, move the overflow list to the spool, write spooled bytes.
func (r *runState) step() {
	r.refresh()
	r.placeBacklog()
	if !r.stopping {
		r.startDrain()
	}
	if len(r.backlog) == 0 && (r.canTake() || !r.p.spoolFull.Load()) {
		// Enqueue found the queue full: these go to the spool, behind
		// whatever the queue holds.
		r.batch = r.p.takeOverflow(r.batch[:0])
		for i, ev := range r.batch {
			r.spoolOrHold(ev)
			r.batch[i] = nil
		}
	}
	r.flushSpool()
}

// wait blocks until one thing happens (an event, an ack, a tick, a stop
// request) and handles it.
func (r *runState) wait(ctx context.Context, tick <-chan time.Time) {
	var in chan *usagev1.UsageEvent
	if r.canTake() {
		in = r.p.ch
	}
	var okc <-chan *jetstream.PubAck
	var errc <-chan error
	if f := r.ring.front(); f != nil {
		okc, errc = f.fut.Ok(), f.fut.Err()
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
	case ack := <-okc:
		r.settle(r.ring.pop(), ack, nil)
		r.settleReady()
	case err := <-errc:
		r.settle(r.ring.pop(), nil, err)
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

// spooling reports whether new events must go to the spool: NATS is down
// or backing off, or the spool holds older events that must go first.
func (r *runState) spooling() bool {
	return !r.up || r.spool.hasData()
}

// canTake reports whether an event taken from the queue can be placed now.
// When it cannot, events stay queued and Enqueue sees the queue fill up.
func (r *runState) canTake() bool {
	if len(r.backlog) > 0 {
		return false
	}
	room := r.ring.len() < r.cfg.MaxPending
	if r.spooling() {
		return !r.p.spoolFull.Load() || (r.up && room)
	}
	return room
}

// take places ev, taken from the queue, and up to BatchSize-1 more events
// already queued behind it. While events come less than FlushDelay apart
// and go straight to NATS, it first waits up to FlushDelay for more, so
// that their publishes leave in one socket write; an event after a quiet
// spell is published at once.
func (r *runState) take(ev *usagev1.UsageEvent) {
	r.refresh() // the connection may have dropped while we waited
	busy := r.cfg.FlushDelay > 0 && r.now.Sub(r.lastTake) < r.cfg.FlushDelay
	r.lastTake = r.now
	if busy && !r.stopping && !r.spooling() && len(r.backlog) == 0 {
		r.gatherAndPublish(ev)
		return
	}
	r.route(ev)
	r.takeMore()
}

func (r *runState) takeMore() {
	for i := 1; i < r.cfg.BatchSize && r.canTake(); i++ {
		select {
		case ev := <-r.p.ch:
			r.route(ev)
		default:
			return
		}
	}
}

// gatherAndPublish holds ev and the events queued after it until
// FlushDelay has passed since ev was taken, or BatchSize events (or as many
// as the publish window has room for) are in hand, then publishes them one
// after another. A stop request or an ack waits meanwhile, at most
// FlushDelay.
func (r *runState) gatherAndPublish(ev *usagev1.UsageEvent) {
	limit := min(r.cfg.BatchSize, r.cfg.MaxPending-r.ring.len())
	b := r.takeQueued(append(r.batch[:0], ev), limit)
	if len(b) < limit {
		r.gather.Reset(r.cfg.FlushDelay)
	wait:
		for len(b) < limit {
			select {
			case ev := <-r.p.ch:
				b = r.takeQueued(append(b, ev), limit)
			case <-r.gather.C:
				break wait
			}
		}
		r.gather.Stop()
	}
	r.refresh()
	r.lastTake = r.now
	for i, ev := range b {
		r.route(ev)
		b[i] = nil
	}
	r.batch = b[:0]
}

// takeQueued appends to b the events waiting in the queue, up to limit in
// all.
func (r *runState) takeQueued(b []*usagev1.UsageEvent, limit int) []*usagev1.UsageEvent {
	for len(b) < limit {
		select {
		case ev := <-r.p.ch:
			b = append(b, ev)
		default:
			return b
		}
	}
	return b
}

// route publishes ev or spools it, holding it in the backlog when neither
// can take it now.
func (r *runState) route(ev *usagev1.UsageEvent) {
	if !r.place(ev, r.spooling() || len(r.backlog) > 0) {
		r.backlog = append(r.backlog, ev)
	}
}

// place publishes ev from memory, or, when spool is set or the publish
// fails, appends it to the spool. A full spool does not stop an event from
// being published when NATS is up. It returns false when ev could be placed
// nowhere.
func (r *runState) place(ev *usagev1.UsageEvent, spool bool) bool {
	data, err := r.marshal(ev)
	if err != nil {
		r.p.dropped.Add(1)
		r.p.log.Error("usage event dropped: cannot marshal", "event_id", ev.GetEventId(), "err", err)
		return true
	}
	room := r.ring.len() < r.cfg.MaxPending
	if !spool && room && r.publishLive(ev, data) {
		return true
	}
	switch err := r.spool.append(data); {
	case err == nil:
		r.p.spooled.Add(1)
		return true
	case errors.Is(err, errSpoolFull):
		r.p.spoolFull.Store(true)
	default:
		r.p.dropped.Add(1)
		r.p.log.Error("usage event dropped: cannot spool", "event_id", ev.GetEventId(), "err", err)
		return true
	}
	return r.up && room && r.publishLive(ev, data)
}

func (r *runState) placeBacklog() {
	n := 0
	for n < len(r.backlog) && r.place(r.backlog[n], r.spooling()) {
		n++
	}
	if n == 0 {
		return
	}
	rest := copy(r.backlog, r.backlog[n:])
	clear(r.backlog[rest:])
	r.backlog = r.backlog[:rest]
}

// spoolOrHold appends ev to the spool, or holds it in the backlog when the
// spool is full.
func (r *runState) spoolOrHold(ev *usagev1.UsageEvent) {
	if !r.place(ev, true) {
		r.backlog = append(r.backlog, ev)
	}
}

func (r *runState) marshal(ev *usagev1.UsageEvent) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend(r.buf[:0], ev)
	if err != nil {
		return nil, err
	}
	r.buf = b
	return b, nil
}

func (r *runState) publishLive(ev *usagev1.UsageEvent, data []byte) bool {
	fut, err := r.publish(ev, data)
	if err != nil {
		r.p.failed.Add(1)
		r.markFailure(err)
		return false
	}
	r.ring.push(flight{ev: ev, fut: fut, deadline: r.now.Add(r.cfg.AckTimeout)})
	r.p.pending.Store(int64(r.ring.len()))
	return true
}

// publish sends one event asynchronously. The client copies data before
// returning, so the caller may reuse it.
func (r *runState) publish(ev *usagev1.UsageEvent, data []byte) (jetstream.PubAckFuture, error) {
	r.msg.Subject, r.msg.Data = r.subject(ev.GetDept()), data
	r.msgID[0] = ev.GetEventId()
	return r.p.js.PublishMsgAsync(&r.msg, r.opts...)
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

// markFailure starts (or lengthens) a pause in publishing: events are
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
	for f := r.ring.front(); f != nil; f = r.ring.front() {
		select {
		case ack := <-f.fut.Ok():
			r.settle(r.ring.pop(), ack, nil)
		case err := <-f.fut.Err():
			r.settle(r.ring.pop(), nil, err)
		default:
			return
		}
	}
}

// expire fails the flights at the front whose ack is overdue.
func (r *runState) expire() {
	now := r.cfg.Clock()
	for f := r.ring.front(); f != nil && now.After(f.deadline); f = r.ring.front() {
		r.settle(r.ring.pop(), nil, errAckTimeout)
	}
}

// settle handles the outcome of one publish, taken from the front of the
// ring.
func (r *runState) settle(f flight, ack *jetstream.PubAck, err error) {
	p := r.p
	p.pending.Store(int64(r.ring.len()))
	if f.gen != 0 {
		r.settleDrain(f, ack, err)
		return
	}
	if err != nil {
		p.failed.Add(1)
		r.markFailure(err)
		r.spoolOrHold(f.ev)
		return
	}
	p.published.Add(1)
	r.backoff = 0
	if r.cfg.OnAck != nil {
		r.cfg.OnAck(f.ev.GetEventId(), ack.Sequence)
	}
}

func (r *runState) settleDrain(f flight, ack *jetstream.PubAck, err error) {
	d := &r.drain
	if !d.active || f.gen != d.gen {
		return // from an abandoned batch: its records are read again
	}
	if err != nil {
		r.p.failed.Add(1)
		r.markFailure(err)
		r.endDrain()
		return
	}
	r.p.drained.Add(1)
	r.backoff = 0
	if r.cfg.OnAck != nil {
		r.cfg.OnAck(f.ev.GetEventId(), ack.Sequence)
	}
	d.left--
	d.commitTo = f.end
	if d.left == 0 {
		d.commitTo = d.next
		r.endDrain()
	}
}

// startDrain publishes the next batch of spooled events when NATS is up and
// no batch is in flight.
func (r *runState) startDrain() {
	if r.drain.active || !r.up || !r.spool.hasData() {
		return
	}
	// A drain batch fills the whole publish window: one batch is in flight
	// at a time, so small batches would make draining a long outage slow.
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
	for _, rec := range recs {
		ev := new(usagev1.UsageEvent)
		if err := proto.Unmarshal(rec.payload, ev); err != nil {
			// Intact on disk yet not an event: set it aside like a corrupt record.
			if err := r.spool.moveBad(rec.start.seg, rec.payload); err != nil {
				r.p.log.Error("usage spool", "err", err)
			}
			r.spool.corrupt.Add(1)
			continue
		}
		fut, err := r.publish(ev, rec.payload)
		if err != nil {
			r.p.failed.Add(1)
			r.markFailure(err)
			d.next = rec.start
			break
		}
		r.ring.push(flight{ev: ev, fut: fut, deadline: r.now.Add(r.cfg.AckTimeout), gen: d.gen, end: rec.end})
		d.left++
	}
	r.p.pending.Store(int64(r.ring.len()))
	if d.left == 0 {
		d.commitTo = d.next
		r.endDrain()
	}
}

// endDrain closes the drain batch, committing the spool position up to
// which every record was published.
func (r *runState) endDrain() {
	d := &r.drain
	d.active = false
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
	if !r.spool.hasData() && r.degraded {
		r.degraded = false
		r.p.log.Info("usage spool drained, publishing directly")
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
	}
}

// finish writes everything still in memory to the spool and closes it.
// Publishes still awaiting an ack are spooled too: if they did reach the
// stream, the republished copy is deduplicated.
func (r *runState) finish() error {
	p := r.p
	r.stopping = true
	p.shut()
	r.settleReady()
	if r.drain.active {
		r.endDrain() // keep what was acked; the rest is read again next time
	}
	var lost int64
	keep := func(ev *usagev1.UsageEvent) {
		data, err := r.marshal(ev)
		if err == nil {
			err = r.spool.append(data)
		}
		if err != nil {
			lost++
			p.dropped.Add(1)
			return
		}
		p.spooled.Add(1)
	}
	for _, ev := range r.backlog {
		keep(ev)
	}
	clear(r.backlog)
	r.backlog = r.backlog[:0]
	for r.ring.len() > 0 {
		if f := r.ring.pop(); f.gen == 0 {
			keep(f.ev)
		}
	}
	p.pending.Store(0)
	for len(p.ch) > 0 {
		keep(<-p.ch)
	}
	for _, ev := range p.takeOverflow(r.batch[:0]) {
		keep(ev)
	}
	if lost > 0 {
		p.log.Error("usage events dropped at shutdown: spool full or failing", "events", lost)
	}
	r.closeErr = r.spool.close()
	if r.closeErr != nil {
		r.closeErr = fmt.Errorf("close usage publisher: %w", r.closeErr)
	}
	return r.closeErr
}
