package chstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

const (
	// DefaultStream is the usage stream the Loader reads (usage.StreamName).
	DefaultStream = usage.StreamName
	// DefaultDurable is the Loader's durable consumer name.
	DefaultDurable = "analytics"
)

// DefaultLeaseBucket is the KV bucket of the analytics lease
// (Options.LeaseBucket).
const DefaultLeaseBucket = "tollgate_analytics_lease"

// ErrWatermarkAhead is returned by Run when the stored watermark is past
// the stream's last sequence: the stream was recreated, and its new events
// would be taken for stored ones. To load the new stream, delete the
// consumer's rows from the watermarks table (ALTER TABLE watermarks DELETE
// WHERE stream = 'TOLLGATE_USAGE' AND consumer = 'analytics').
var ErrWatermarkAhead = errors.New("watermark ahead of the stream's last sequence")

// LoaderOptions configure a Loader. Zero values take the defaults shown.
type LoaderOptions struct {
	// Stream is the usage stream. Default TOLLGATE_USAGE.
	Stream string
	// Durable is the pull consumer's name, and the watermark's key. Default
	// "analytics". One Loader runs per durable (see the package doc).
	Durable string
	// BatchSize is how many events a batch collects before it is
	// inserted, and the most stream messages it fetches. Messages are
	// fetched at the events per message of the last batch, so the first
	// batch after a start, or where the stream turns from legacy to
	// batched messages, may hold more events: at most
	// max(8 MiB, BatchSize KiB) of messages. Default 10000.
	BatchSize int
	// BatchInterval is the longest the first event of a batch waits for the
	// batch to fill before it is inserted anyway. Default 1s.
	BatchInterval time.Duration
	// AckWait is the consumer's AckWait. While a batch is held (waiting to
	// fill, or retrying an insert) its messages are marked in progress every
	// AckWait/3, so they are not redelivered. Default 30s.
	AckWait time.Duration
	// InsertTimeout bounds each ClickHouse call: the check for stored rows,
	// the insert, the watermark write. Default 15s.
	InsertTimeout time.Duration
	// MinBackoff and MaxBackoff bound the exponential wait between attempts
	// to store a batch, or to reach NATS. Default 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// LeaseBucket is the NATS KV bucket holding the lease that lets one
	// Loader per durable load at a time; other Loaders of the durable stand
	// by. Default DefaultLeaseBucket.
	LeaseBucket string
	// LeaseTTL is how long a Loader that stopped renewing its lease (it
	// crashed or lost NATS) keeps it, so the most a standby waits to take
	// over; after a clean stop it takes over at once. Default 4 ×
	// InsertTimeout; at least 3 × InsertTimeout.
	LeaseTTL time.Duration
	// Replicas is the replica count of what the loaders create on NATS:
	// the lease bucket, and the audit stream (created or updated to it by
	// RunLoaders' audit loader), as the config's nats.replicas. Default 1.
	Replicas int
	// Logger receives retries, poison events and rewinds. Default
	// slog.Default().
	Logger *slog.Logger
	// Registerer receives the Loader's metrics when set.
	Registerer prometheus.Registerer
	// Now stamps ingested_at and the watermark. Default time.Now.
	Now func() time.Time
}

func (o LoaderOptions) withDefaults() (LoaderOptions, error) {
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.Durable == "" {
		o.Durable = DefaultDurable
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 10000
	}
	if o.BatchInterval <= 0 {
		o.BatchInterval = time.Second
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.InsertTimeout <= 0 {
		o.InsertTimeout = 15 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.LeaseBucket == "" {
		o.LeaseBucket = DefaultLeaseBucket
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 4 * o.InsertTimeout
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AckWait < 3*o.BatchInterval {
		return o, fmt.Errorf("ack wait %v: want at least 3 batch intervals (%v)", o.AckWait, 3*o.BatchInterval)
	}
	if o.LeaseTTL < 3*o.InsertTimeout {
		return o, fmt.Errorf("lease ttl %v: want at least 3 insert timeouts (%v)", o.LeaseTTL, 3*o.InsertTimeout)
	}
	return o, nil
}

// fetchBytesPerEvent and minFetchBytes cap the bytes of one fetch at
// max(minFetchBytes, BatchSize × fetchBytesPerEvent): events per message
// are guessed from the last batch, and the cap bounds a batch when the
// guess is wrong (the first batch after a start, or where the stream
// turns from legacy messages to batched ones). A message larger than the
// cap is fetched alone, without it.
const (
	fetchBytesPerEvent = 1 << 10
	minFetchBytes      = 8 << 20
)

// minFetchWait is the shortest fetch worth asking for; a batch whose time
// is closer to its end than this is inserted as it is.
const minFetchWait = 5 * time.Millisecond

// Loader copies usage events from the stream into ClickHouse, each exactly
// once (see the package doc). It is used by one goroutine (Run) only.
type Loader struct {
	store *Store
	js    jetstream.JetStream
	o     LoaderOptions
	log   *slog.Logger
	m     loaderMetrics

	lease    *lease // nil only in tests that drive loop directly
	stream   jetstream.Stream
	cons     jetstream.Consumer
	wm       uint64    // every event with a stream sequence <= wm is stored
	lastDseq uint64    // consumer sequence of the last delivery received
	verify   bool      // look up stored rows before the next insert
	lagAt    time.Time // when the lag gauge was last refreshed

	bufs    [2]batch // the batch being stored and the next one
	pending []pendingEvent
	ids     map[string]struct{}
	seen    map[uint64]struct{}
	cols    columns
	perMsg  int // events per message in the last batch collected, at least 1

	// dedup records the batches applied from the messages up to wm; it is
	// stored with the watermark (windows) and read back by setup.
	dedup  *usage.Dedup
	winBuf []byte

	// afterInsert and afterWatermark, when set (tests), run after a batch's
	// insert and after its watermark write. An error ends Run at once with
	// that error, without acknowledging anything, as a crash would.
	afterInsert, afterWatermark func() error
	// onInsert, when set (tests), runs after each successful insert, with
	// the events inserted.
	onInsert func(events []pendingEvent)
}

// pendingEvent is a decoded event waiting to be inserted.
type pendingEvent struct {
	ev  *usagev1.UsageEvent
	src Source
}

// NewLoader validates o and returns a Loader; Run starts it.
func NewLoader(store *Store, js jetstream.JetStream, o LoaderOptions) (*Loader, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newLoaderMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	return &Loader{
		store:  store,
		js:     js,
		o:      o,
		log:    o.Logger,
		m:      m,
		ids:    make(map[string]struct{}, o.BatchSize),
		seen:   make(map[uint64]struct{}, o.BatchSize),
		dedup:  &usage.Dedup{},
		perMsg: 1,
	}, nil
}

// Run loads events until ctx is cancelled. It first takes the durable's
// lease, standing by while another Loader holds it; then it attaches to (or
// creates) the durable consumer and loads batch after batch. While
// ClickHouse or NATS is unreachable it retries with backoff, holding the
// batches in hand (at most two) and fetching nothing more. If the lease is
// lost it drops them, unacknowledged, and stands by again. After a cancel
// the batches in hand are finished, unless one waits out a backoff: then it
// is abandoned unacknowledged and the next holder loads it. Run releases
// the lease when it returns: nil after a cancel, ErrWatermarkAhead, or the
// error of a test hook.
func (l *Loader) Run(ctx context.Context) error {
	if l.lease == nil {
		err := l.retry(ctx, "lease", func(ctx context.Context) error {
			var err error
			l.lease, err = newLease(ctx, l.js, l.o.LeaseBucket, l.o.Stream+"."+l.o.Durable, l.o.LeaseTTL, l.o.Replicas)
			return err
		})
		if err != nil {
			return ignoreCancel(err)
		}
	}
	for {
		if err := l.standBy(ctx); err != nil {
			return ignoreCancel(err)
		}
		err := l.lead(ctx)
		l.lease.release(ctx)
		l.m.leader.Set(0)
		if errors.Is(err, errLeaseLost) && ctx.Err() == nil {
			l.log.Warn("analytics lease lost; standing by", "durable", l.o.Durable)
			continue
		}
		return ignoreCancel(err)
	}
}

// standBy waits until this Loader holds the lease.
func (l *Loader) standBy(ctx context.Context) error {
	poll := min(time.Second, l.o.LeaseTTL/6)
	logged := false
	return l.retry(ctx, "lease", func(ctx context.Context) error {
		for {
			c, cancel := context.WithTimeout(ctx, l.o.InsertTimeout)
			ok, err := l.lease.tryAcquire(c)
			cancel()
			if err != nil {
				return err
			}
			if ok {
				l.m.leader.Set(1)
				l.log.Info("analytics lease acquired; loading", "durable", l.o.Durable)
				return nil
			}
			if !logged {
				l.log.Info("analytics lease held elsewhere; standing by", "durable", l.o.Durable)
				logged = true
			}
			if !sleep(ctx, poll) {
				return ctx.Err()
			}
		}
	})
}

// lead loads while the lease is held.
func (l *Loader) lead(ctx context.Context) error {
	if err := l.retry(ctx, "start", l.setup); err != nil {
		return err
	}
	return l.loop(ctx)
}

// holding reports whether the lease is held for at least margin more.
func (l *Loader) holding(margin time.Duration) bool {
	return l.lease == nil || l.lease.held(margin)
}

// writeMargin is how long the lease must still be held to start a write
// to ClickHouse: a write takes at most InsertTimeout on our side, and the
// server may still be finishing it a while after.
func (l *Loader) writeMargin() time.Duration { return 2 * l.o.InsertTimeout }

// batch is a fetched batch in hand: stream messages, decoded once fetched
// (while the previous batch is being stored).
type batch struct {
	msgs   []jetstream.Msg
	seqs   []uint64              // stream sequence of msgs[i]
	dec    []*usagev1.UsageBatch // msgs[i] decoded, when errs[i] is nil
	errs   []error               // why msgs[i] could not be decoded
	events int                   // events in msgs (counted by add)
	gap    bool                  // a delivery before or among msgs went missing
	err    error                 // the fetch failed (msgs may hold what came before)
	stop   func()                // stops the heartbeat of msgs; nil when none runs
}

// add appends message m, stored at stream sequence seq, and counts its
// events; decode decodes what was added.
func (b *batch) add(m jetstream.Msg, seq uint64) {
	b.msgs = append(b.msgs, m)
	b.seqs = append(b.seqs, seq)
	b.events += countEvents(m.Data())
}

// decode decodes b's messages into dec and errs.
func (b *batch) decode() {
	for len(b.dec) < len(b.msgs) {
		b.dec = append(b.dec, new(usagev1.UsageBatch))
	}
	for i, m := range b.msgs {
		b.errs = append(b.errs, usage.DecodeMessage(m.Data(), b.dec[i]))
	}
}

// eventsField is the field number of UsageBatch.events.
const eventsField = 1002

// countEvents counts the events of an encoded message without decoding
// it: the events fields of a batch, or 1 for a legacy single event (or a
// malformed message). It sizes fetches, so it need not be exact.
func countEvents(data []byte) int {
	n := 0
	for len(data) > 0 {
		num, typ, k := protowire.ConsumeTag(data)
		if k < 0 {
			break
		}
		data = data[k:]
		if num == eventsField && typ == protowire.BytesType {
			n++
		}
		if k = protowire.ConsumeFieldValue(num, typ, data); k < 0 {
			break
		}
		data = data[k:]
	}
	return max(n, 1)
}

// reset empties b, keeping its memory (the decoded batches are reset as
// they are reused).
func (b *batch) reset() {
	clear(b.msgs)
	clear(b.errs)
	b.msgs, b.seqs, b.errs, b.events, b.gap, b.err = b.msgs[:0], b.seqs[:0], b.errs[:0], 0, false, nil
}

// release stops the batch's heartbeat. Its messages, unless acknowledged,
// are redelivered after AckWait (or at once to a rewound consumer).
func (b *batch) release() {
	if b.stop != nil {
		b.stop()
		b.stop = nil
	}
}

// loop loads batches from l.cons until ctx is cancelled. The next batch is
// collected while the current one is stored, so at most two batches are in
// memory: while a batch waits for ClickHouse, nothing more is fetched.
func (l *Loader) loop(ctx context.Context) error {
	cur, next := &l.bufs[0], &l.bufs[1]
	defer func() {
		l.bufs[0].release()
		l.bufs[1].release()
	}()
	fetchBackoff := l.o.MinBackoff
	reconnects, rewindDue := l.js.Conn().Stats().Reconnects, false
	l.collect(ctx, cur)
	for {
		if !l.holding(0) {
			return errLeaseLost
		}
		if r := l.js.Conn().Stats().Reconnects; r != reconnects {
			// NATS may have restarted, and a cluster whose every node
			// restarted at once can have lost its last messages: start over
			// from the watermark, which checks the stream's history there
			// (checkHistory). What is in hand is delivered again.
			reconnects, rewindDue = r, true
		}
		if cur.err != nil && len(cur.msgs) == 0 {
			l.m.errors.WithLabelValues("fetch").Inc()
			l.log.Warn("analytics fetch", "err", cur.err, "retry_in", fetchBackoff)
			if !errors.Is(cur.err, jetstream.ErrConsumerNotFound) && !errors.Is(cur.err, jetstream.ErrConsumerDeleted) {
				sleep(ctx, fetchBackoff)
				fetchBackoff = min(2*fetchBackoff, l.o.MaxBackoff)
				if ctx.Err() != nil {
					return nil
				}
				l.collect(ctx, cur)
				continue
			}
			cur.gap = true
		}
		fetchBackoff = l.o.MinBackoff
		if cur.gap || rewindDue {
			// A delivery went missing: its sequence is unknown, so nothing
			// in hand may raise the watermark. Start over from it.
			cur.release()
			l.m.rewinds.Inc()
			if rewindDue {
				l.log.Info("analytics: NATS reconnected; rewinding the consumer", "watermark", l.wm)
			} else {
				l.log.Warn("analytics delivery gap; rewinding the consumer", "watermark", l.wm)
			}
			rewindDue = false
			if err := l.retry(ctx, "rewind", l.rewind); err != nil {
				return err
			}
			l.collect(ctx, cur)
			continue
		}
		if len(cur.msgs) == 0 {
			if ctx.Err() != nil {
				return nil
			}
			l.refreshLag(ctx, true) // idle: at most once per BatchInterval
			l.collect(ctx, cur)
			continue
		}
		var wg sync.WaitGroup
		wg.Go(func() { l.collect(ctx, next) })
		err := l.handle(ctx, cur)
		wg.Wait()
		if err != nil {
			return err
		}
		cur, next = next, cur
	}
}

// errAbandoned ends Run when ctx is cancelled while a batch waits out a
// backoff.
var errAbandoned = errors.New("batch abandoned at shutdown")

func ignoreCancel(err error) error {
	if errors.Is(err, errAbandoned) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// retry runs f until it succeeds, ctx is cancelled (errAbandoned) or it
// returns ErrWatermarkAhead, errLeaseLost or a test hook's error, backing
// off exponentially between attempts.
func (l *Loader) retry(ctx context.Context, op string, f func(context.Context) error) error {
	backoff := l.o.MinBackoff
	for {
		err := f(ctx)
		var hook *hookError
		switch {
		case errors.As(err, &hook):
			return hook.err
		case errors.Is(err, context.Canceled) && ctx.Err() != nil:
			return err
		case err == nil || errors.Is(err, ErrWatermarkAhead) || errors.Is(err, errLeaseLost):
			l.m.backoff.Set(0)
			return err
		}
		l.m.errors.WithLabelValues(op).Inc()
		l.m.backoff.Set(backoff.Seconds())
		l.log.Warn("analytics "+op, "err", err, "retry_in", backoff)
		if !sleep(ctx, backoff) {
			return errAbandoned
		}
		backoff = min(2*backoff, l.o.MaxBackoff)
		if l.stream != nil {
			l.refreshLag(ctx, false)
		}
	}
}

// sleep waits d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// setup reads the watermark and attaches to the consumer, rewinding it to
// the watermark unless it is exactly there with nothing pending.
func (l *Loader) setup(ctx context.Context) error {
	c, cancel := context.WithTimeout(ctx, l.o.InsertTimeout)
	defer cancel()
	var err error
	if l.stream, err = l.js.Stream(c, l.o.Stream); err != nil {
		return fmt.Errorf("open stream %s: %w", l.o.Stream, err)
	}
	var windows []byte
	if l.wm, windows, err = l.store.loadState(c, l.o.Stream, l.o.Durable); err != nil {
		return err
	}
	// The batches applied up to the watermark: those in hand when the last
	// run ended may not be stored.
	if l.dedup, err = decodeWindows(windows); err != nil {
		return fmt.Errorf("read batch windows of %s: %w", l.o.Durable, err)
	}
	l.m.watermark.Set(float64(l.wm))
	l.verify = true // the last process may have inserted without recording it
	cons, err := l.js.Consumer(c, l.o.Stream, l.o.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return l.rewind(ctx)
	case err != nil:
		return fmt.Errorf("open consumer %s: %w", l.o.Durable, err)
	}
	info := cons.CachedInfo()
	cfg := info.Config
	changed, err := l.checkHistory(c)
	if err != nil {
		return err
	}
	if !changed && info.NumAckPending == 0 && info.NumRedelivered == 0 && info.AckFloor.Stream == l.wm &&
		cfg.AckPolicy == jetstream.AckAllPolicy && cfg.AckWait == l.o.AckWait &&
		cfg.MaxAckPending == l.maxAckPending() && cfg.FilterSubject == "" && len(cfg.FilterSubjects) == 0 {
		if err := l.checkStream(c); err != nil {
			return err
		}
		l.cons, l.lastDseq = cons, info.Delivered.Consumer
		return nil
	}
	return l.rewind(ctx)
}

func (l *Loader) maxAckPending() int { return 2 * l.o.BatchSize }

// rewind deletes the durable consumer and creates it again to deliver from
// the watermark on. The consumer's own state is disposable: the watermark
// in ClickHouse says what is stored.
func (l *Loader) rewind(ctx context.Context) error {
	if !l.holding(l.o.InsertTimeout) {
		return errLeaseLost
	}
	c, cancel := context.WithTimeout(ctx, l.o.InsertTimeout)
	defer cancel()
	if err := l.checkStream(c); err != nil {
		return err
	}
	if _, err := l.checkHistory(c); err != nil {
		return err
	}
	err := l.js.DeleteConsumer(c, l.o.Stream, l.o.Durable)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete consumer %s: %w", l.o.Durable, err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       l.o.Durable,
		Description:   "Tollgate analytics: loads usage events into ClickHouse",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       l.o.AckWait,
		MaxAckPending: l.maxAckPending(),
	}
	if l.wm > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, l.wm+1
	}
	cons, err := l.js.CreateConsumer(c, l.o.Stream, cfg)
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", l.o.Durable, err)
	}
	l.cons, l.lastDseq = cons, 0
	return nil
}

// checkHistory makes sure that the stream's message at the watermark is
// one this loader applied. A stream that lost its last messages (a whole
// cluster killed before they reached the disk of any node) gives their
// sequences to the messages published after, and a recreated stream
// starts its sequences again; taken as stored, those messages' events
// would never be loaded. So while the message at the watermark holds a
// batch the dedup state has not applied, checkHistory walks down (at most
// usage.HistoryCheckDepth messages) and lowers the watermark below the lowest such
// message: the consumer then delivers from there, the batches applied
// before are skipped by the dedup state as republished, and the next
// insert drops events already stored (verify). It stops at a message it
// cannot tell by (a legacy event, an undecodable or a deleted one).
// changed reports whether it lowered the watermark.
func (l *Loader) checkHistory(ctx context.Context) (changed bool, err error) {
	low := l.wm
	var b usagev1.UsageBatch
	for seq := l.wm; seq > 0 && l.wm-seq < usage.HistoryCheckDepth; seq-- {
		m, err := l.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("read stream %s at %d: %w", l.o.Stream, seq, err)
		}
		if !l.dedup.Unapplied(m.Data, &b) {
			break
		}
		low = seq - 1
	}
	if low == l.wm {
		return false, nil
	}
	l.m.historyChanges.Inc()
	l.log.Warn("analytics: the stream holds messages below the watermark that were never loaded (it lost its last messages, or was recreated); loading from the first of them",
		"watermark", l.wm, "from_seq", low+1)
	l.wm, l.verify = low, true
	l.m.watermark.Set(float64(low))
	return true, nil
}

// checkStream refuses a watermark past the stream's end and reports events
// that expired from the stream before they were loaded.
func (l *Loader) checkStream(ctx context.Context) error {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s info: %w", l.o.Stream, err)
	}
	st := info.State
	if st.LastSeq < l.wm {
		return fmt.Errorf("%w: stream %s ends at %d, watermark of %s is %d",
			ErrWatermarkAhead, l.o.Stream, st.LastSeq, l.o.Durable, l.wm)
	}
	if st.Msgs > 0 && st.FirstSeq > l.wm+1 {
		l.log.Warn("analytics: events left the stream before they were loaded",
			"from_seq", l.wm+1, "to_seq", st.FirstSeq-1)
	}
	l.m.lag.Set(float64(st.LastSeq - l.wm))
	return nil
}

// collect fetches the next batch into b: up to BatchSize messages, or
// what arrived within BatchInterval of the first, or nothing after a whole
// BatchInterval. It notes a gap when a delivery is missing (the consumer
// sequence skipped) or the consumer is gone, and starts the heartbeat of
// what it kept. After a cancel it fetches nothing more.
func (l *Loader) collect(ctx context.Context, b *batch) {
	b.release()
	b.reset()
	b.gap, b.err = l.fetch(ctx, b)
	if len(b.msgs) > 0 {
		l.perMsg = max(1, b.events/len(b.msgs))
	}
	if !b.gap {
		b.decode()
	}
	if len(b.msgs) > 0 && !b.gap {
		b.stop = l.heartbeat(b.msgs)
	}
}

func (l *Loader) fetch(ctx context.Context, b *batch) (gap bool, err error) {
	var deadline time.Time
	capBytes := true
	for len(b.msgs) < l.o.BatchSize && b.events < l.o.BatchSize && ctx.Err() == nil {
		wait := l.o.BatchInterval
		if len(b.msgs) > 0 {
			if wait = time.Until(deadline); wait < minFetchWait {
				break
			}
		}
		// A batched message carries many events: ask for as many
		// messages as the events still wanted fill, at the events per
		// message of this batch so far, or of the last one.
		per := l.perMsg
		if len(b.msgs) > 0 {
			per = max(1, b.events/len(b.msgs))
		}
		n := min(max(1, (l.o.BatchSize-b.events)/per), l.o.BatchSize-len(b.msgs))
		opts := []jetstream.FetchOpt{jetstream.FetchMaxWait(wait)}
		if capBytes {
			opts = append(opts, jetstream.FetchMaxBytes(max(minFetchBytes, l.o.BatchSize*fetchBytesPerEvent)))
		}
		began, had := time.Now(), len(b.msgs)
		mb, err := l.cons.Fetch(n, opts...)
		if err != nil {
			return false, fmt.Errorf("fetch from %s: %w", l.o.Durable, err)
		}
		for m := range mb.Messages() {
			md, err := m.Metadata()
			if err != nil || md.Sequence.Consumer != l.lastDseq+1 {
				return true, nil
			}
			l.lastDseq = md.Sequence.Consumer
			if len(b.msgs) == 0 {
				deadline = time.Now().Add(l.o.BatchInterval)
			}
			b.add(m, md.Sequence.Stream)
		}
		if err := mb.Error(); err != nil {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				return true, nil
			}
			return false, fmt.Errorf("fetch from %s: %w", l.o.Durable, err)
		}
		if len(b.msgs) == had && capBytes && time.Since(began) < wait/2 {
			// Nothing, early: the next message is larger than the cap.
			capBytes = false
			continue
		}
		if len(b.msgs) == 0 {
			return false, nil // idle for a whole interval
		}
	}
	return false, nil
}

// handle stores batch b and acknowledges it.
func (l *Loader) handle(ctx context.Context, b *batch) error {
	top, topMsg := l.prepare(b)
	if top > l.wm {
		if err := l.commit(ctx, top); err != nil {
			return err
		}
	}
	b.release()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.o.InsertTimeout)
	defer cancel()
	// AckAll: acknowledging the highest sequence acknowledges the batch.
	if err := topMsg.DoubleAck(actx); err != nil {
		// Harmless: the batch is redelivered and skipped as stored.
		l.m.errors.WithLabelValues("ack").Inc()
		l.log.Warn("analytics ack", "seq", top, "err", err)
	}
	l.m.batches.Inc()
	if top > l.wm {
		l.wm = top
		l.m.watermark.Set(float64(top))
	}
	// A partial batch means the loader caught up: worth an exact gauge.
	l.refreshLag(ctx, len(b.msgs) < l.o.BatchSize)
	return nil
}

// heartbeat marks msgs in progress every AckWait/3 until stop is called.
func (l *Loader) heartbeat(msgs []jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(l.o.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, m := range msgs {
					_ = m.InProgress() // a lost one only risks a harmless redelivery
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// prepare collects b's new events into l.pending, skipping messages at or
// below the watermark, deliveries repeated within the batch, batches
// applied before (a republish: same producer and seq, see usage.Dedup),
// events whose id came earlier in the batch, and undecodable messages. It
// records the batches it keeps in l.dedup. It returns the batch's highest
// stream sequence and its message.
func (l *Loader) prepare(b *batch) (top uint64, topMsg jetstream.Msg) {
	clear(l.pending)
	l.pending = l.pending[:0]
	clear(l.ids)
	clear(l.seen)
	for i, m := range b.msgs {
		seq := b.seqs[i]
		if topMsg == nil || seq >= top {
			top, topMsg = seq, m // the latest delivery of the highest sequence
		}
		d, err := b.dec[i], b.errs[i]
		if seq <= l.wm {
			l.m.skippedStored.Add(float64(max(1, len(d.Events))))
			continue
		}
		if _, dup := l.seen[seq]; dup {
			l.m.skippedDup.Add(float64(max(1, len(d.Events))))
			continue
		}
		l.seen[seq] = struct{}{}
		if err != nil {
			l.m.skippedPoison.Inc()
			l.log.Error("analytics: undecodable usage message; skipping", "seq", seq, "subject", m.Subject(), "err", err)
			continue
		}
		src := Source{StreamSeq: seq, Producer: d.ProducerId, BatchSeq: d.Seq}
		if src.Producer != "" {
			fresh, lost := l.dedup.Apply(src.Producer, src.BatchSeq)
			if lost > 0 {
				l.m.lostBatches.Add(float64(lost))
				l.log.Warn("analytics: batches given up as lost", "producer", src.Producer, "below_seq", src.BatchSeq, "count", lost)
			}
			if !fresh {
				l.m.republished.Inc()
				l.m.skippedRepublished.Add(float64(len(d.Events)))
				continue
			}
		}
		for _, ev := range d.Events {
			if ev.EventId != "" {
				if _, dup := l.ids[ev.EventId]; dup {
					l.m.skippedDup.Inc()
					continue
				}
				l.ids[ev.EventId] = struct{}{}
			}
			l.pending = append(l.pending, pendingEvent{ev: ev, src: src})
		}
	}
	return top, topMsg
}

// commit stores l.pending and the watermark top, retrying with backoff
// until both succeeded. Attempts are not cut short by ctx; a cancel during
// a backoff abandons the batch.
//
// The batch's ingested_at is stamped once, before the first attempt. On a
// cluster an attempt after one whose outcome is unknown sends the same
// block again without looking up stored rows: the replicated tables'
// block deduplication drops whatever part of it was stored, even on a
// replica that died before the one now written to could see it, and in
// each rollup separately (docs/analytics.md, "Exactly once on a
// cluster").
func (l *Loader) commit(ctx context.Context, top uint64) error {
	work := context.WithoutCancel(ctx)
	inserted, resend := false, false
	ingested := l.o.Now()
	return l.retry(ctx, "store", func(context.Context) error {
		if !inserted {
			sent, err := l.insert(work, ingested, resend)
			if err != nil {
				l.verify = true // the insert may have landed all the same
				// On a cluster, once an insert was sent, the same block
				// goes again, whole: block deduplication drops each part
				// already stored, in usage_events and in every rollup
				// alike. (A failed look-up sent nothing: it runs again.)
				resend = resend || (sent && l.store.o.Cluster != "")
				return err
			}
			inserted = true
			if l.afterInsert != nil {
				if err := l.afterInsert(); err != nil {
					return &hookError{err}
				}
			}
		}
		if !l.holding(l.writeMargin()) {
			return errLeaseLost
		}
		var err error
		if l.winBuf, err = appendWindows(l.winBuf[:0], l.dedup); err != nil {
			return err
		}
		c, cancel := context.WithTimeout(work, l.o.InsertTimeout)
		defer cancel()
		if err := l.store.writeWatermark(c, l.o.Stream, l.o.Durable, top, l.winBuf, l.o.Now()); err != nil {
			return err
		}
		if l.afterWatermark != nil {
			if err := l.afterWatermark(); err != nil {
				return &hookError{err}
			}
		}
		return nil
	})
}

// hookError carries a test hook's error through retry.
type hookError struct{ err error }

func (e *hookError) Error() string { return e.err.Error() }
func (e *hookError) Unwrap() error { return e.err }

// insert inserts l.pending in one batch, loaded at ingested, and reports
// whether it sent an insert. Unless resend (the same block again, on a
// cluster), when l.verify is set it first
// waits for running inserts to end and drops the events already stored,
// and keeps verifying the next batch only if it found any: the last
// process, or a failed attempt, stored at most one batch without a
// watermark, and its events come first.
func (l *Loader) insert(ctx context.Context, ingested time.Time, resend bool) (sent bool, err error) {
	if l.verify && !resend && len(l.pending) > 0 {
		lo, hi, minTS, maxTS := l.bounds()
		c, cancel := context.WithTimeout(ctx, l.o.InsertTimeout)
		found, err := l.store.lookupStored(c, lo, hi, minTS, maxTS)
		cancel()
		if err != nil {
			return false, err
		}
		if len(found) > 0 {
			kept := l.pending[:0]
			for _, p := range l.pending {
				// The event id must match too: a recreated stream reuses
				// sequence numbers, and a batched message holds many.
				if _, ok := found[storedRow{p.src.StreamSeq, p.ev.EventId}]; !ok {
					kept = append(kept, p)
				}
			}
			l.m.skippedStored.Add(float64(len(l.pending) - len(kept)))
			l.pending = kept
		}
		l.verify = len(found) > 0
	}
	if len(l.pending) == 0 {
		return false, nil
	}
	if !l.holding(l.writeMargin()) {
		return false, errLeaseLost
	}
	l.cols.reset()
	for _, p := range l.pending {
		l.cols.add(p.ev, p.src, ingested)
	}
	c, cancel := context.WithTimeout(ctx, l.o.InsertTimeout)
	defer cancel()
	start := time.Now()
	if err := l.store.insertEvents(c, &l.cols); err != nil {
		return true, err
	}
	l.m.insertSeconds.Observe(time.Since(start).Seconds())
	l.m.rows.Add(float64(len(l.pending)))
	if resend {
		// The block sent again settled the batch; the next one was never
		// sent, so it needs no look-up (which, on a cluster, would wait
		// for every replica, the dead one too).
		l.verify = false
	}
	if l.onInsert != nil {
		l.onInsert(l.pending)
	}
	return true, nil
}

// bounds returns the stream sequence and timestamp ranges of l.pending.
func (l *Loader) bounds() (lo, hi uint64, minTS, maxTS uint32) {
	for i, p := range l.pending {
		ts := unixSeconds(p.ev.Timestamp)
		if i == 0 {
			lo, hi, minTS, maxTS = p.src.StreamSeq, p.src.StreamSeq, ts, ts
			continue
		}
		lo, hi = min(lo, p.src.StreamSeq), max(hi, p.src.StreamSeq)
		minTS, maxTS = min(minTS, ts), max(maxTS, ts)
	}
	return lo, hi, minTS, maxTS
}

// refreshLag sets the lag gauge from the stream's last sequence, at most
// once a second unless forced.
func (l *Loader) refreshLag(ctx context.Context, force bool) {
	if !force && time.Since(l.lagAt) < time.Second {
		return
	}
	l.lagAt = time.Now()
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := l.stream.Info(c)
	if err != nil {
		return // the next refresh tries again; fetch errors are counted
	}
	if last := info.State.LastSeq; last > l.wm {
		l.m.lag.Set(float64(last - l.wm))
	} else {
		l.m.lag.Set(0)
	}
}
