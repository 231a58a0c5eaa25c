package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// DefaultFoldInterval is ConsumerOptions.FoldInterval's default: each
// total is written at most 5 times a second.
const DefaultFoldInterval = 200 * time.Millisecond

// ConsumerOptions configure a Consumer. Zero values take the defaults shown.
type ConsumerOptions struct {
	// Stream is the usage stream. Default TOLLGATE_USAGE.
	Stream string
	// Durable is the pull consumer's name. Default "budget".
	Durable string
	// Batch is the most stream messages (legacy events or producers'
	// batches of events) fetched and written at once. Default 4000: each
	// fold writes every total it touches once, so under a backlog larger
	// folds mean fewer KV writes per event.
	Batch int
	// MaxWait bounds how long a batch waits to fill after its first
	// message. Default 50ms.
	MaxWait time.Duration
	// IdleGap ends a batch early when no message arrives for this long,
	// so that an event after a quiet spell is folded at once. Default
	// 10ms. Under steady traffic FoldInterval, not IdleGap, bounds how
	// often a total is written: messages that come during the interval
	// wait and go into the next fold together.
	IdleGap time.Duration
	// FoldInterval is the least time from the start of one fold to the
	// start of the next, so each total is written at most once per
	// interval however the events arrive. A message that comes sooner
	// waits, with every message after it, until the interval has passed;
	// one that comes later is folded by MaxWait and IdleGap alone. Default
	// DefaultFoldInterval; negative: none.
	FoldInterval time.Duration
	// MaxAckPending is the consumer's MaxAckPending. Default 20000.
	MaxAckPending int
	// AckWait is the consumer's AckWait. Default 30s.
	AckWait time.Duration
	// BatchTimeout bounds writing one batch, which runs to its end even
	// after Run's ctx is cancelled. Default 20s.
	BatchTimeout time.Duration
	// NakDelay is the redelivery delay of a batch that could not be written,
	// and the pause before the next fetch. Default 1s.
	NakDelay time.Duration
	// CacheSize bounds the totals and alert records kept in memory between
	// batches; past it the cache is dropped and rebuilt from the bucket.
	// Default 200000.
	CacheSize int

	// Limits are the configured limits, for alerts.
	Limits []Limit
	// Thresholds are the fractions of each limit that raise an alert when a
	// total reaches them. Default 0.5, 0.8, 1.0. Each must be in (0, 2].
	Thresholds []float64
	// WebhookURL, when set, receives every alert as a JSON POST too.
	WebhookURL string
	// WebhookTimeout bounds one POST. Default 5s.
	WebhookTimeout time.Duration
	// WebhookQueue bounds alerts waiting for the webhook; more are dropped
	// and counted. Default 256.
	WebhookQueue int
	// HTTPClient posts to the webhook. Default a client with WebhookTimeout.
	HTTPClient *http.Client
	// WebhookFormat is the webhook body: "json" (the Alert, the default)
	// or "slack" (a Slack incoming-webhook message, {"text": ...}).
	WebhookFormat string
	// ForecastAlerts announces, once per limit and period, when the spend
	// projected at a day or month limit's period end crosses the limit
	// (Project, from the day totals over the trailing window).
	ForecastAlerts bool
	// AnomalyFactor, when over 1, announces once per scope value and hour
	// when the hour's spend of a scope value with a configured limit is
	// over AnomalyFactor times its baseline: the hourly rate of its day
	// totals over the trailing window (SpikeOf). 0 turns it off.
	AnomalyFactor float64

	// Logger receives poison events, lost batches, failed batches and
	// webhook failures.
	// Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the consumer's metrics when set.
	Registerer prometheus.Registerer
	// Now stamps SpendTotal.updated_unix_ms and is the clock of forecast
	// and anomaly alerts. Default time.Now.
	Now func() time.Time
}

// Consumer folds usage events from the stream into the spend totals of the
// KV bucket (see the package documentation for how it counts exactly once).
// Several Consumers may run against the same stream and bucket at once.
// A Consumer is used by one goroutine (Run) only.
type Consumer struct {
	js     jetstream.JetStream
	o      ConsumerOptions
	log    *slog.Logger
	limits limitIndex
	thresh []uint32 // thresholds in parts per million, ascending
	m      consumerMetrics
	now    func() time.Time

	spend, alertKV, dedupKV jetstream.KeyValue
	hook                    *webhook
	fc                      forecastState // forecast and anomaly alerts (alerts.go)

	safe     uint64    // every event with a stream sequence <= safe is in all its totals
	lastFold time.Time // when the last batch was collected (FoldInterval)
	cache    map[TotalID]*cachedTotal
	alerts   map[TotalID]*alertRecord
	aggs     map[TotalID]*agg
	groups   map[groupKey]*agg    // fold's per-principal sums (id unset)
	absent   map[TotalID]struct{} // totals whose write expecting "absent" conflicted in this fold
	events   []event
	written  []writtenTotal
	batch    usagev1.UsageBatch // the message being decoded; its strings share the message's bytes
	plain    []byte             // a compressed message's expansion, which batch's strings share then
	names    map[string]string  // intern's copies of producer ids and scope values

	// applier says which batches count; its state is exact after every
	// stream message up to safe (see loadCheckpoints). stale means a
	// failed fold may have changed it: it is reloaded before the next.
	applier usage.Applier
	stale   bool
	// historyDue asks for checkHistory before the next fold: set at start,
	// after the message iterator failed and after the connection
	// reconnected (reconnects is the count last seen).
	historyDue bool
	reconnects uint64
	// historyShort: checkHistory found the stream ending below its
	// reference point and waits for it to pass it.
	historyShort bool
	touched      map[string]struct{} // producers whose Window the fold changed
	// lastSeq and lastProducer are the stream sequence and producer of the
	// last batch take decoded: writeCheckpoints writes the checkpoint of
	// the fold's last message's producer first.
	lastSeq      uint64
	lastProducer string
	cpRev        map[string]uint64 // producer -> revision of its checkpoint as last read or written
	cpBuf        []byte
	poison       []uint64 // stream seqs of the fold's undecodable messages
	tally        foldTally

	// beforeCheckpoint, when set (tests), runs after the totals of a batch
	// are written and before its checkpoints; beforeAck after both and
	// before the acks. An error fails the batch; errCrash ends Run at once
	// without acking or naking, as a crash would.
	beforeCheckpoint, beforeAck func() error
	// beforeAlerts, when set (tests), runs after the totals of a batch are
	// written and before their alerts are checked; an error fails the
	// batch as beforeCheckpoint's.
	beforeAlerts func() error
	// beforeHistoryReload, when set (tests), runs when checkHistory found
	// the message at its reference point unapplied, before it reads the
	// checkpoints again.
	beforeHistoryReload func()
	// afterCheckpoint, when set (tests), runs after each checkpoint write
	// with its producer; an error fails the batch as beforeCheckpoint's.
	afterCheckpoint func(producer string) error
}

// foldTally counts what one fold saw, added to the metrics once it is
// written (a failed fold is redone and must not count twice).
type foldTally struct {
	dups, lost uint64
	lostBy     []lostBatches
}

type lostBatches struct {
	producer string
	n        uint64
	floor    uint64
}

type consumerMetrics struct {
	events, poison, batches, failed, conflicts, gapFills, alerts, webhookFailed prometheus.Counter
	dupBatches, lostBatches, historyChecks, historyChanges, historyRepublished  prometheus.Counter
	missing                                                                     prometheus.Gauge
	lag                                                                         prometheus.Gauge
}

func newConsumerMetrics(reg prometheus.Registerer) consumerMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tollgate", Subsystem: "budget", Name: name, Help: help})
	}
	m := consumerMetrics{
		events:        c("events_total", "Usage events folded into the spend totals."),
		poison:        c("poison_events_total", "Usage events that could not be decoded and were terminated."),
		batches:       c("batches_total", "Batches written and acknowledged."),
		failed:        c("failed_batches_total", "Batches that could not be written and were redelivered."),
		conflicts:     c("kv_conflicts_total", "Total writes that lost an optimistic-concurrency race and were redone."),
		gapFills:      c("gap_fills_total", "Batches that first read events delivered elsewhere from the stream."),
		alerts:        c("alerts_total", "Threshold alerts published."),
		webhookFailed: c("webhook_failures_total", "Alerts the webhook did not accept or that were dropped."),
		dupBatches:    c("duplicate_batches_total", "Usage batches skipped because the stream held them earlier (a republish)."),
		lostBatches:   c("lost_batches_total", "Usage batches given up as lost: a producer's window moved past them before they arrived."),
		historyChecks: c("history_checks_total", "Checks of the stream's history against the checkpoints: at start, after a failed fetch, after a reconnect."),
		historyChanges: c("history_changes_total", "History checks that found the stream holding, at or below what the totals were folded up to, batches they never counted "+
			"(acknowledged messages lost and their sequences reused, or the stream recreated)."),
		historyRepublished: c("history_republished_batches_total", "Batches a history check published again so that they are folded: found below what the totals were folded up to, never counted."),
		missing: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tollgate", Subsystem: "budget", Name: "producer_missing_batches",
			Help: "Usage batches, summed over producers, between each producer's oldest missing batch and its newest applied one that have not arrived."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tollgate", Subsystem: "budget", Name: "consumer_lag_messages",
			Help: "Usage stream messages not yet delivered to the budget consumer when it took its latest batch (JetStream's pending count of the durable consumer, carried by each delivered message)."}),
	}
	if reg != nil {
		for _, x := range []prometheus.Collector{m.events, m.poison, m.batches, m.failed, m.conflicts, m.gapFills, m.alerts, m.webhookFailed,
			m.dupBatches, m.lostBatches, m.historyChecks, m.historyChanges, m.historyRepublished, m.missing, m.lag} {
			reg.MustRegister(x)
		}
	}
	return m
}

// event is the part of a usage event the totals need.
type event struct {
	seq              uint64
	cost             int64
	prompt, complete uint64
	starts           [numPeriods]int32
	hour             int64 // hours since 1970, for anomaly alerts
	vals             [numScopes]string
}

// groupKey is what decides an event's totals: its scope values and the
// starts of its periods.
type groupKey struct {
	vals   [numScopes]string
	starts [numPeriods]int32
}

// agg is one batch's contribution to one total.
type agg struct {
	id               TotalID
	cost             int64
	prompt, complete uint64
	requests         uint64
	minSeq, maxSeq   uint64
}

// cachedTotal is a total as last read or written, with its KV revision.
type cachedTotal struct {
	cost                      int64
	prompt, complete, reqs    uint64
	asOf                      uint64
	rev                       uint64
	updatedMs                 int64
	scope, value, period, per string
}

// writtenTotal records a total changed by the current batch, for alerts.
type writtenTotal struct {
	id    TotalID
	spend int64
}

// NewConsumer validates o and returns a Consumer; Run starts it.
func NewConsumer(js jetstream.JetStream, o ConsumerOptions) (*Consumer, error) {
	if o.Stream == "" {
		o.Stream = Stream
	}
	if o.Durable == "" {
		o.Durable = Durable
	}
	if o.Batch <= 0 {
		o.Batch = 4000
	}
	if o.IdleGap <= 0 {
		o.IdleGap = 10 * time.Millisecond
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 50 * time.Millisecond
	}
	if o.FoldInterval == 0 {
		o.FoldInterval = DefaultFoldInterval
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = 20000
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.BatchTimeout <= 0 {
		o.BatchTimeout = 20 * time.Second
	}
	if o.NakDelay <= 0 {
		o.NakDelay = time.Second
	}
	if o.CacheSize <= 0 {
		o.CacheSize = 200_000
	}
	if o.Thresholds == nil {
		o.Thresholds = []float64{0.5, 0.8, 1.0}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Consumer{
		js:      js,
		o:       o,
		log:     o.Logger,
		limits:  newLimitIndex(o.Limits),
		m:       newConsumerMetrics(o.Registerer),
		now:     o.Now,
		cache:   make(map[TotalID]*cachedTotal),
		alerts:  make(map[TotalID]*alertRecord),
		aggs:    make(map[TotalID]*agg),
		groups:  make(map[groupKey]*agg),
		absent:  make(map[TotalID]struct{}),
		touched: make(map[string]struct{}),
		cpRev:   make(map[string]uint64),
	}
	for _, t := range o.Thresholds {
		if !(t > 0 && t <= 2) {
			return nil, fmt.Errorf("alert threshold %v: want a fraction in (0, 2]", t)
		}
		c.thresh = append(c.thresh, uint32(t*1e6+0.5))
	}
	slices.Sort(c.thresh)
	c.thresh = slices.Compact(c.thresh)
	if err := checkWebhookFormat(o.WebhookFormat); err != nil {
		return nil, err
	}
	if o.WebhookURL != "" {
		c.hook = newWebhook(o, c.m.webhookFailed)
	}
	return c, nil
}

// Run creates or updates the durable consumer, then fetches, folds and
// acknowledges batches until ctx is cancelled; the batch being written when
// that happens is finished first. It returns nil after a cancel, or the
// error that kept it from starting.
func (c *Consumer) Run(ctx context.Context) error {
	var err error
	if c.spend, err = c.js.KeyValue(ctx, Bucket); err != nil {
		return fmt.Errorf("open bucket %s: %w", Bucket, err)
	}
	if c.alertKV, err = c.js.KeyValue(ctx, AlertBucket); err != nil {
		return fmt.Errorf("open bucket %s: %w", AlertBucket, err)
	}
	if c.dedupKV, err = c.js.KeyValue(ctx, DedupBucket); err != nil {
		return fmt.Errorf("open bucket %s: %w", DedupBucket, err)
	}
	cons, err := c.durable(ctx)
	if err != nil {
		return err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer %s info: %w", c.o.Durable, err)
	}
	c.safe = info.AckFloor.Stream
	if err := c.loadCheckpoints(ctx); err != nil { // after reading safe, see loadCheckpoints
		return err
	}
	c.historyDue = true // checked before the first fold (checkHistory)
	c.reconnects = c.js.Conn().Stats().Reconnects

	var wg sync.WaitGroup
	hookCtx, stopHook := context.WithCancel(context.WithoutCancel(ctx))
	if c.hook != nil {
		wg.Go(func() { c.hook.run(hookCtx, c.log) })
	}
	defer func() {
		stopHook()
		wg.Wait()
	}()

	msgs := make([]jetstream.Msg, 0, c.o.Batch)
	var it jetstream.MessagesContext
	defer func() {
		if it != nil {
			it.Stop()
		}
	}()
	for ctx.Err() == nil {
		if it == nil {
			if cons == nil {
				// After a failure: the durable consumer may be gone (deleted
				// with a recreated stream, or lost by NATS); creating it
				// again is a no-op when it is there.
				if cons, err = c.durable(ctx); err != nil {
					c.log.Warn("budget consume", "err", err)
					c.pause(ctx)
					continue
				}
			}
			// The iterator keeps up to two batches coming while one is written.
			if it, err = cons.Messages(jetstream.PullMaxMessages(2 * c.o.Batch)); err != nil {
				c.log.Warn("budget consume", "err", err)
				it, cons = nil, nil
				c.pause(ctx)
				continue
			}
		}
		msgs, err = c.collect(ctx, iterMessages{it}, msgs[:0])
		if err != nil {
			if ctx.Err() != nil {
				break // unprocessed messages are redelivered to the next instance
			}
			c.log.Warn("budget consume", "err", err)
			it.Stop()
			it, cons = nil, nil
			c.historyDue = true // the stream may have lost messages meanwhile
			c.pause(ctx)
			continue
		}
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.BatchTimeout)
		if r := c.js.Conn().Stats().Reconnects; r != c.reconnects {
			c.reconnects, c.historyDue = r, true // NATS may have restarted without a failed fetch
		}
		if c.historyDue {
			err = c.checkHistory(bctx)
		}
		if err == nil {
			err = c.process(bctx, msgs)
		}
		cancel()
		switch {
		case errors.Is(err, errCrash):
			return err
		case err != nil:
			c.m.failed.Inc()
			c.log.Error("budget batch not written; redelivering", "events", len(msgs), "err", err)
			for _, m := range msgs {
				_ = m.NakWithDelay(c.o.NakDelay)
			}
			c.pause(ctx)
		}
	}
	return nil
}

// durable creates the durable pull consumer, or updates it to this
// Consumer's settings.
func (c *Consumer) durable(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.o.Stream, jetstream.ConsumerConfig{
		Durable:       c.o.Durable,
		Description:   "Tollgate budget: folds usage events into spend totals",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.o.AckWait,
		MaxAckPending: c.o.MaxAckPending,
		MaxWaiting:    512,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", c.o.Durable, c.o.Stream, err)
	}
	return cons, nil
}

// messages is where collect takes messages from: next returns the next
// one, waiting at most wait (nats.ErrTimeout after it), or, with wait 0,
// until ctx ends.
type messages interface {
	next(ctx context.Context, wait time.Duration) (jetstream.Msg, error)
}

// iterMessages is messages from a JetStream pull iterator.
type iterMessages struct{ it jetstream.MessagesContext }

func (m iterMessages) next(ctx context.Context, wait time.Duration) (jetstream.Msg, error) {
	if wait == 0 {
		return m.it.Next(jetstream.NextContext(ctx))
	}
	return m.it.Next(jetstream.NextMaxWait(wait))
}

// collect appends to msgs the next batch: it waits for one message, then
// takes more until Batch messages, or until FoldInterval after the last
// fold's start and then MaxWait after the first message or a pause of
// IdleGap with no message (so a lone event is not held for MaxWait).
func (c *Consumer) collect(ctx context.Context, src messages, msgs []jetstream.Msg) ([]jetstream.Msg, error) {
	m, err := src.next(ctx, 0)
	if err != nil {
		return msgs, err
	}
	msgs = append(msgs, m)
	deadline := time.Now().Add(c.o.MaxWait)
	earliest := c.lastFold.Add(c.o.FoldInterval)
	for len(msgs) < c.o.Batch && ctx.Err() == nil {
		wait := min(time.Until(deadline), c.o.IdleGap)
		early := time.Until(earliest)
		if early > 0 {
			wait = early
		}
		if wait <= 0 {
			break
		}
		m, err := src.next(ctx, wait)
		if errors.Is(err, nats.ErrTimeout) {
			if early > 0 {
				continue // the interval is over: MaxWait and IdleGap decide
			}
			break
		}
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, m)
	}
	c.lastFold = time.Now()
	return msgs, nil
}

// errCrash, returned by beforeAck, stops Run as a crash would.
var errCrash = errors.New("simulated crash")

func (c *Consumer) pause(ctx context.Context) {
	t := time.NewTimer(c.o.NakDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// seqMsg is a fetched message and its stream sequence.
type seqMsg struct {
	m   jetstream.Msg
	seq uint64
}

// process folds one fetched batch into the totals and acknowledges it.
//
// Totals skip events at or below their as_of_seq, which is exact only if
// every writer applies events in stream order from a point below which all
// events are applied. c.safe is that point: messages at or below it are
// only acknowledged. If the new messages are not exactly safe+1, safe+2,
// ... (the missing ones went to another instance, or await redelivery after
// a crash or a Nak), the whole range is read from the stream instead, so
// nothing below a written as_of_seq is ever left out. The same order feeds
// c.applier, so whether a batch counts is decided by the stream's order
// alone, by every instance alike.
func (c *Consumer) process(ctx context.Context, msgs []jetstream.Msg) (err error) {
	if c.stale {
		if err := c.loadCheckpoints(ctx); err != nil {
			return err
		}
	}
	defer func() {
		if err != nil {
			c.stale = true // the failed fold may have marked batches applied
		}
	}()
	items := make([]seqMsg, 0, len(msgs))
	lag := uint64(math.MaxUint64)
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			c.log.Error("budget: message without metadata; terminating", "subject", m.Subject(), "err", err)
			_ = m.Term()
			continue
		}
		items = append(items, seqMsg{m: m, seq: md.Sequence.Stream})
		lag = min(lag, md.NumPending) // the last delivered has the fewest after it
	}
	if len(items) > 0 {
		c.m.lag.Set(float64(lag))
	}
	slices.SortFunc(items, func(a, b seqMsg) int { return cmpU64(a.seq, b.seq) })

	top, contiguous := c.safe, true
	for i := range items {
		it := &items[i]
		if it.seq <= c.safe || it.seq == top {
			continue // applied already, or a duplicate delivery in this batch
		}
		if it.seq != top+1 {
			contiguous = false
		}
		top = it.seq
	}
	c.events = c.events[:0]
	c.poison = c.poison[:0]
	c.tally = foldTally{lostBy: c.tally.lostBy[:0]}
	clear(c.touched)
	if top > c.safe {
		if contiguous {
			last := c.safe
			for i := range items {
				if it := &items[i]; it.seq > last {
					last = it.seq
					if c.take(it.m.Data(), it.seq) != nil {
						c.poison = append(c.poison, it.seq)
					}
				}
			}
		} else {
			c.m.gapFills.Inc()
			// Every message up to top, recording the undecodable ones.
			err := c.readRange(ctx, c.safe+1, top, func(m jetstream.Msg, seq uint64) error {
				if c.take(m.Data(), seq) != nil {
					c.poison = append(c.poison, seq)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		if err := c.fold(ctx); err != nil {
			return err
		}
		if c.beforeCheckpoint != nil {
			if err := c.beforeCheckpoint(); err != nil {
				return err
			}
		}
		if err := c.writeCheckpoints(ctx, top); err != nil {
			return err
		}
	}
	if c.beforeAck != nil {
		if err := c.beforeAck(); err != nil {
			return err
		}
	}
	for i := range items {
		it := &items[i]
		if _, bad := slices.BinarySearch(c.poison, it.seq); bad {
			c.m.poison.Inc()
			c.log.Error("budget: undecodable usage message; terminating", "seq", it.seq, "subject", it.m.Subject())
			_ = it.m.Term()
			continue
		}
		_ = it.m.Ack()
	}
	// The fold's count before its events: whoever has seen the events
	// counted sees their fold counted too.
	c.m.batches.Inc()
	c.m.events.Add(float64(len(c.events)))
	c.m.dupBatches.Add(float64(c.tally.dups))
	c.m.lostBatches.Add(float64(c.tally.lost))
	for _, l := range c.tally.lostBy {
		c.log.Warn("budget: usage batches given up as lost", "producer", l.producer, "batches", l.n, "floor", l.floor)
	}
	if len(c.touched) > 0 {
		c.m.missing.Set(float64(c.applier.Missing()))
	}
	c.safe = max(c.safe, top)
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// take decodes the message at stream sequence seq and appends the events
// that count to c.events: a legacy event always (its totals' as_of_seq
// keeps it from counting twice), a batch's events only when c.applier
// finds the batch fresh. It returns an error for an undecodable message.
func (c *Consumer) take(data []byte, seq uint64) error {
	b := &c.batch
	// Aliased: b's strings share data's bytes (or c.plain's); the producer
	// id and the scope values, which outlive the message, are interned
	// copies.
	if err := usage.DecodeMessageAliased(data, b, &c.plain); err != nil {
		return err
	}
	b.ProducerId = c.intern(b.ProducerId)
	c.lastSeq, c.lastProducer = seq, b.ProducerId
	v, lost := c.applier.Apply(seq, b)
	if lost > 0 {
		c.tally.lost += lost
		c.tally.lostBy = append(c.tally.lostBy, lostBatches{producer: b.ProducerId, n: lost, floor: c.applier.Window(b.ProducerId).Floor()})
	}
	switch v {
	case usage.Repeat:
		c.tally.dups++
		return nil
	case usage.Covered:
		return nil
	case usage.Fresh:
		c.touched[b.ProducerId] = struct{}{}
	}
	for _, u := range b.Events {
		ev := event{seq: seq, cost: u.CostNanoUsd, prompt: u.PromptTokens, complete: u.CompletionTokens,
			starts: periodStarts(u.Timestamp), hour: u.Timestamp / int64(time.Hour)}
		ev.vals = ScopeValues(u.KeyId, u.Subject, u.Dept, u.Team, u.Project)
		for i, v := range ev.vals {
			ev.vals[i] = c.intern(v)
		}
		c.events = append(c.events, ev)
	}
	return nil
}

// maxInterned bounds the consumer's interned strings; past it the table
// starts afresh.
const maxInterned = 1 << 16

// intern returns a copy of s that does not share the message's bytes, the
// same copy for the same text while the table holds it: a principal's
// values are copied once, not once per event.
func (c *Consumer) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := c.names[s]; ok {
		return v
	}
	if len(c.names) >= maxInterned || c.names == nil {
		c.names = make(map[string]string)
	}
	v := strings.Clone(s)
	c.names[v] = v
	return v
}

// readRange hands visit every message of stream sequences from..to, read
// with an ordered consumer, and stops at visit's first error.
func (c *Consumer) readRange(ctx context.Context, from, to uint64, visit func(m jetstream.Msg, seq uint64) error) error {
	oc, err := c.js.OrderedConsumer(ctx, c.o.Stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   from,
	})
	if err != nil {
		return fmt.Errorf("read stream %d..%d: %w", from, to, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read stream %d..%d: %w", from, to, err)
		}
		batch, err := oc.Fetch(c.o.Batch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("read stream %d..%d: %w", from, to, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			if seq > to {
				return nil // to itself was deleted
			}
			if err := visit(m, seq); err != nil {
				return err
			}
			if seq == to {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("read stream %d..%d: %w", from, to, err)
		}
		if n == 0 {
			return fmt.Errorf("read stream %d..%d: stream ended early", from, to)
		}
	}
}

// fold aggregates c.events per total and writes every touched total once.
// Events of one principal and period share all their totals, so they are
// summed per (scope values, period starts) first: one map lookup per event
// instead of one per total (up to 18).
func (c *Consumer) fold(ctx context.Context) error {
	clear(c.groups)
	for i := range c.events {
		e := &c.events[i]
		k := groupKey{vals: e.vals, starts: e.starts}
		g := c.groups[k]
		if g == nil {
			g = &agg{minSeq: e.seq}
			c.groups[k] = g
		}
		g.cost += e.cost
		g.prompt += e.prompt
		g.complete += e.complete
		g.requests++
		g.maxSeq = e.seq
	}
	clear(c.aggs)
	for k, g := range c.groups {
		for sc := range numScopes {
			v := k.vals[sc]
			if sc != ScopeGlobal && v == "" {
				continue
			}
			for p := range numPeriods {
				id := TotalID{Scope: sc, Value: v, Period: p, Start: k.starts[p]}
				a := c.aggs[id]
				if a == nil {
					a = &agg{id: id, minSeq: g.minSeq}
					c.aggs[id] = a
				}
				a.cost += g.cost
				a.prompt += g.prompt
				a.complete += g.complete
				a.requests += g.requests
				a.minSeq = min(a.minSeq, g.minSeq)
				a.maxSeq = max(a.maxSeq, g.maxSeq)
			}
		}
	}
	if len(c.cache) > c.o.CacheSize {
		clear(c.cache)
	}
	c.written = c.written[:0]
	clear(c.absent)
	todo := make([]*agg, 0, len(c.aggs))
	for _, a := range c.aggs {
		todo = append(todo, a)
	}
	for round := 0; len(todo) > 0; round++ {
		if round == 10 {
			return fmt.Errorf("write %d totals: still conflicting after %d rounds", len(todo), round)
		}
		var err error
		if todo, err = c.writeRound(ctx, todo); err != nil {
			return err
		}
	}
	if c.beforeAlerts != nil {
		if err := c.beforeAlerts(); err != nil {
			return err
		}
	}
	return c.checkAlerts(ctx)
}

// inflight bounds the async KV writes awaiting acks at once.
const inflight = 512

type pendingWrite struct {
	a      *agg
	next   cachedTotal
	f      jetstream.PubAckFuture
	expect uint64 // the revision the write expected
}

// writeRound writes each total of todo with optimistic concurrency and
// returns those that lost a race (their cache entry is dropped, so the next
// round re-reads them).
func (c *Consumer) writeRound(ctx context.Context, todo []*agg) ([]*agg, error) {
	var retry []*agg
	pend := make([]pendingWrite, 0, min(len(todo), inflight))
	flush := func() error {
		for _, w := range pend {
			select {
			case ack := <-w.f.Ok():
				w.next.rev = ack.Sequence
				cur := c.cache[w.a.id]
				if cur == nil {
					cur = new(cachedTotal)
					c.cache[w.a.id] = cur
				}
				*cur = w.next
				c.written = append(c.written, writtenTotal{id: w.a.id, spend: w.next.cost})
			case err := <-w.f.Err():
				if !isConflict(err) {
					return fmt.Errorf("write total %s: %w", w.a.id.Key(), err)
				}
				c.m.conflicts.Inc()
				if w.expect == 0 {
					c.absent[w.a.id] = struct{}{}
				}
				delete(c.cache, w.a.id)
				retry = append(retry, w.a)
			case <-ctx.Done():
				return fmt.Errorf("write totals: %w", ctx.Err())
			}
		}
		pend = pend[:0]
		return nil
	}
	for _, a := range todo {
		cur, err := c.current(ctx, a.id)
		if err != nil {
			return nil, err
		}
		next, changed := c.apply(cur, a)
		if !changed {
			// Already applied: the batch is redone after a fold that wrote
			// its totals and failed before announcing their alerts, or
			// another writer got here first. The alerts are checked
			// anyway (announce raises only what the alert record lacks).
			c.written = append(c.written, writtenTotal{id: a.id, spend: cur.cost})
			continue
		}
		data, err := proto.Marshal(&usagev1.SpendTotal{
			Scope: next.scope, Value: next.value, Period: next.period, PeriodStart: next.per,
			CostNanoUsd: next.cost, PromptTokens: next.prompt, CompletionTokens: next.complete,
			Requests: next.reqs, AsOfSeq: next.asOf, UpdatedUnixMs: next.updatedMs,
		})
		if err != nil {
			return nil, fmt.Errorf("encode total: %w", err)
		}
		key := a.id.Key()
		if _, ok := c.absent[a.id]; ok && cur.rev == 0 {
			// Absent but read back as deleted: let Create handle the tombstone.
			if _, err := c.spend.Create(ctx, key, data); err != nil {
				if errors.Is(err, jetstream.ErrKeyExists) {
					delete(c.cache, a.id)
					retry = append(retry, a)
					continue
				}
				return nil, fmt.Errorf("create total %s: %w", key, err)
			}
			delete(c.cache, a.id) // revision unknown: re-read next time
			c.written = append(c.written, writtenTotal{id: a.id, spend: next.cost})
			continue
		}
		f, err := c.js.PublishMsgAsync(&nats.Msg{Subject: "$KV." + Bucket + "." + key, Data: data},
			jetstream.WithExpectLastSequencePerSubject(cur.rev))
		if err != nil {
			return nil, fmt.Errorf("write total %s: %w", key, err)
		}
		pend = append(pend, pendingWrite{a: a, next: next, f: f, expect: cur.rev})
		if len(pend) == inflight {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return retry, nil
}

// isConflict reports a wrong-last-sequence answer: another writer updated
// the key since we read it.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// current returns the total for id from the cache or the bucket.
func (c *Consumer) current(ctx context.Context, id TotalID) (*cachedTotal, error) {
	if cur := c.cache[id]; cur != nil {
		return cur, nil
	}
	cur := &cachedTotal{scope: id.Scope.String(), period: id.Period.String(), per: id.PeriodStart()}
	if id.Scope != ScopeGlobal {
		cur.value = id.Value
	}
	e, err := c.spend.Get(ctx, id.Key())
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Absent, or a delete marker: a write expecting revision 0 fails on
		// the latter, and the retry then uses Create (see c.absent).
	case err != nil:
		return nil, fmt.Errorf("read total %s: %w", id.Key(), err)
	default:
		var st usagev1.SpendTotal
		if err := proto.Unmarshal(e.Value(), &st); err != nil {
			return nil, fmt.Errorf("decode total %s: %w", id.Key(), err)
		}
		cur.cost, cur.prompt, cur.complete, cur.reqs = st.CostNanoUsd, st.PromptTokens, st.CompletionTokens, st.Requests
		cur.asOf, cur.rev, cur.updatedMs = st.AsOfSeq, e.Revision(), st.UpdatedUnixMs
	}
	c.cache[id] = cur
	return cur, nil
}

// apply returns cur plus the events of a not yet in it, and whether that
// changed anything.
func (c *Consumer) apply(cur *cachedTotal, a *agg) (cachedTotal, bool) {
	next := *cur
	asOf := cur.asOf
	switch {
	case asOf >= a.maxSeq:
		return next, false
	case asOf < a.minSeq:
		next.cost += a.cost
		next.prompt += a.prompt
		next.complete += a.complete
		next.reqs += a.requests
	default:
		// Another writer got part of this batch in first: add only the
		// events above its as_of_seq.
		for i := range c.events {
			e := &c.events[i]
			if e.seq > asOf && e.belongsTo(a.id) {
				next.cost += e.cost
				next.prompt += e.prompt
				next.complete += e.complete
				next.reqs++
			}
		}
	}
	next.asOf = a.maxSeq
	next.updatedMs = c.now().UnixMilli()
	return next, true
}

func (e *event) belongsTo(id TotalID) bool {
	if id.Scope != ScopeGlobal && e.vals[id.Scope] != id.Value {
		return false
	}
	return e.starts[id.Period] == id.Start
}
