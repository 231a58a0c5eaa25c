// Package usage publishes the gateway's usage events to the JetStream stream
// TOLLGATE_USAGE without ever making a request wait on the network or the
// disk.
//
// The request path hands each event to [Publisher.Enqueue], which only puts
// a pointer on a bounded queue. One goroutine ([Publisher.Run]) gathers the
// queued events into batches (usagev1.UsageBatch, issue #13) and publishes
// each batch as one JetStream message, asynchronously, compressed by
// default (Compress; every reader decodes with DecodeMessage). Each
// publisher is a producer with a stable id, kept in its spool directory,
// and numbers its batches 1, 2, 3... never reusing a seq (see
// producer.go). When NATS is down or failing, batches go to a spool of
// append-only files on local disk instead, and are republished from
// there, in order and with the same seq, once NATS answers again. A batch
// published twice (an ack lost to a timeout, a crash between a publish and
// the spool's offset update) is dropped by the stream's duplicate window
// when it comes back quickly (Nats-Msg-Id "<producer>:<seq>"), and by the
// consumers' [Dedup] however late it comes.
package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

var (
	// ErrFull is returned by Enqueue under Config.FailClosed when both the
	// in-memory queue and the spool are full; the gateway answers 503.
	ErrFull = errors.New("usage publisher full")
	// ErrClosed is returned by Enqueue after Close (or after Run stopped).
	ErrClosed = errors.New("usage publisher closed")
)

// DefaultFlushDelay is Config.FlushDelay's default. In BenchmarkPublishCPU,
// at 16000 events/s arriving one by one, 250µs made one socket write carry
// about seven events instead of one and halved the CPU per event, in the
// client and in the server alike. 5ms also batched a gateway serving 1,000
// requests/s (events 1ms apart, each published alone under 250µs): there,
// the gateway's CPU per request fell by 14-21% in the benchmark suite's
// set-up. 20ms lets a gateway at 17,000 requests/s fill its batches
// (BatchSize) where 5ms sent about 85 events a message: in the benchmark
// suite's set-up at 8 clients, 7% more requests a second (NATS and the
// budget service share the load generator's core there, and handle a
// third of the messages). It costs up to 40ms on an event's way to the
// stream (FlushDelay), and longer publisher work per batch (p99 at one
// client about 0.05 ms higher).
const DefaultFlushDelay = 20 * time.Millisecond

// payloadHeadroom is what NewPublisher leaves of the server's max_payload
// for a message's headers when it lowers Config.BatchBytes to fit.
const payloadHeadroom = 4 << 10

// DefaultMaxPending is Config.MaxPending's default, in batches.
const DefaultMaxPending = 256

// Config tunes a Publisher. Zero fields take the documented defaults; only
// SpoolDir is required.
type Config struct {
	// Buffer is the in-memory queue capacity, in events. Default 65536.
	// When it is full, up to Buffer more events wait in an overflow list
	// bound for the spool.
	Buffer int
	// BatchSize is the most events one batch (one stream message) carries.
	// Default 256.
	BatchSize int
	// BatchBytes is the most bytes one encoded batch takes; a batch is
	// closed before an event would take it over. Default 256 KiB, at most
	// 4 MiB, and lowered to fit the NATS server's max_payload (1 MiB by
	// default) when NATS is connected at NewPublisher.
	BatchBytes int
	// MaxPending bounds the publishes (batches) awaiting their ack. Default
	// 256. The publisher publishes with the core client and reads its acks
	// itself (ack.go), so none of the JetStream context's asynchronous
	// publish options apply to it.
	MaxPending int
	// AckTimeout is how long a publish may wait for its ack before its
	// batch is spooled. Default 5s.
	AckTimeout time.Duration
	// SpoolDir holds the spool files and the producer's id and seq files
	// (producer.go). Required; one directory per process: two processes
	// sharing one would share a producer id and reuse seqs.
	SpoolDir string
	// SpoolMaxBytes bounds the spool's files. Default 1 GiB.
	SpoolMaxBytes int64
	// SyncInterval is how often written spool data is fsynced, and so the
	// most a power cut can lose. Default 100ms.
	SyncInterval time.Duration
	// FlushDelay is how long Run may hold a batch open after its first
	// event while more arrive, so that up to BatchSize events leave in one
	// message with one ack: events that arrive one by one otherwise cost a
	// publish, a socket write and wake-ups each (issues #12, #13). It
	// delays the publication of usage events, never a request, and only
	// while they come less than FlushDelay apart: an event after a quiet
	// spell is published at once, in a batch of its own (with whatever is
	// already queued). A held batch leaves with the first event that ends
	// (Timestamp plus LatencyTotalUs) FlushDelay or more after the batch's
	// first was taken, so while events keep coming no timer wakes Run; when
	// none comes, it leaves twice FlushDelay after. Default
	// DefaultFlushDelay; negative never holds a batch open.
	FlushDelay time.Duration
	// FailClosed decides what happens when the queue and the spool are both
	// full: true makes Enqueue return ErrFull; false drops the event and
	// counts it in Stats.Dropped.
	FailClosed bool
	// Compression is how batches are written to the stream and the spool:
	// CompressionS2 (the default, "" too) or CompressionNone. Every reader
	// (DecodeMessage) reads both; readers that predate compression refuse
	// compressed batches, so they are upgraded first.
	Compression string
	// OnAck, when set, is called from the Run goroutine with the event id
	// and stream sequence of each acknowledged event, in publish order
	// (budget.Tracker.OnAck releases the event's reservation with it): the
	// events of one batch share its message's sequence. It must not block.
	// A batch republished within the stream's duplicate window reports its
	// original sequence; one republished later, a new one.
	OnAck func(eventID string, seq uint64)
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
}

// Compression values of Config.Compression (config: usage.compression).
const (
	CompressionS2   = "s2"
	CompressionNone = "none"
)

func (c Config) withDefaults() Config {
	if c.Compression == "" {
		c.Compression = CompressionS2
	}
	if c.Buffer <= 0 {
		c.Buffer = 65536
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	c.BatchBytes = min(c.BatchBytes, maxRecord)
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 5 * time.Second
	}
	if c.SpoolMaxBytes <= 0 {
		c.SpoolMaxBytes = 1 << 30
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = 100 * time.Millisecond
	}
	if c.FlushDelay == 0 {
		c.FlushDelay = DefaultFlushDelay
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

// Stats is a snapshot of a Publisher's counters. Every event counted in
// Queued is eventually counted in Published, Drained or Dropped; until then
// it is queued (QueueLen), in the batch being formed or in one held behind
// a batch neither NATS nor the spool could take yet (neither is counted in
// QueueLen or Pending), pending or spooled. So QueueLen, Pending and
// SpoolBytes all 0 does not mean every event went out; Published + Drained
// + Dropped == Queued does. An event Enqueue drops itself (queue and spool
// full, fail-open) is counted in Dropped only. The event counts are those
// of the batches counted alike in the Batches fields.
type Stats struct {
	Queued     int64 // events accepted by Enqueue
	Published  int64 // events acked by the stream straight from memory
	Spooled    int64 // events written to the spool
	Drained    int64 // spooled events acked by the stream
	Failed     int64 // events whose publish failed or timed out (their batch was then spooled)
	Dropped    int64 // events lost: queue and spool full (fail-open), unmarshalable, or a spool write error
	Torn       int64 // torn spool records truncated when the spool was opened
	Corrupt    int64 // corrupt spool records moved aside to a .bad file
	SpoolBytes int64 // spooled bytes not yet drained
	QueueLen   int64 // events waiting in memory
	Pending    int64 // publishes (batches) awaiting their ack

	BatchesPublished int64  // batches acked straight from memory
	BatchesSpooled   int64  // batches written to the spool
	BatchesDrained   int64  // spooled records acked (batches, and legacy single events of an old spool)
	BatchesFailed    int64  // publishes that failed or timed out
	BatchesDropped   int64  // batches lost to a full or failing spool
	LastSeq          uint64 // seq of the last batch formed; 0 before the first

	Begun        int64 // requests handed to Begin and tracked until their event (journal.go)
	BegunDropped int64 // Begin values refused: their queue or the open requests were full
	Recovered    int64 // events published for requests a previous run began and never finished (also in Queued)
}

// lifecycle states of a Publisher.
const (
	stateIdle = iota
	stateRunning
	stateDone
)

// Publisher publishes usage events to JetStream, spooling them to disk when
// NATS cannot take them. Enqueue may be called from any goroutine; Run is
// the one goroutine that does the work.
type Publisher struct {
	js  jetstream.JetStream
	nc  *nats.Conn
	cfg Config
	log *slog.Logger

	// mu guards closed; Enqueue holds it for reading so that Close knows no
	// Enqueue is still putting an event on ch once closed is set.
	mu     sync.RWMutex
	closed bool
	ch     chan *usagev1.UsageEvent

	// omu guards over, the events Enqueue could not put on the full ch.
	omu     sync.Mutex
	over    []*usagev1.UsageEvent
	overLen atomic.Int64
	wake    chan struct{}
	// batchFull tells Run, sleeping through FlushDelay, that the queue
	// holds the batchWant events its batch still needs; batchWant is
	// MaxInt64 while Run is not sleeping.
	batchFull chan struct{}
	batchWant atomic.Int64
	// gatherUntil is when (unix ns) the batch Run gathers has been held
	// FlushDelay: the first event that ends then or later wakes Run.
	// MaxInt64 while Run is not sleeping.
	gatherUntil atomic.Int64

	life     sync.Mutex // guards state
	state    int
	closeReq chan context.Context
	done     chan struct{}

	spool     *spool
	spoolFull atomic.Bool

	// jch carries Begin and Progress values to Run; jwoken is set once
	// Begin woke Run and cleared when Run takes them, so that a burst of
	// requests wakes it once; idle is set while Run waits without its
	// tick. stopped is set by shut.
	jch     chan jentry
	jwoken  atomic.Bool
	idle    atomic.Bool
	stopped atomic.Bool
	journal *journal // owned by Run
	found   map[string]*openReq

	begun, begunDropped, recovered atomic.Int64

	queued, published, spooled, drained atomic.Int64
	failed, dropped, pending            atomic.Int64

	batchesPublished, batchesSpooled, batchesDrained atomic.Int64
	batchesFailed, batchesDropped                    atomic.Int64
	lastSeq                                          atomic.Uint64

	// num numbers the batches; spoolLow is at most the seq of the oldest
	// batch found in the spool at start (0: none). Both belong to Run.
	num      *numbering
	spoolLow uint64

	run runState // owned by the Run goroutine
}

// NewPublisher opens (and, after a crash, repairs) the spool in
// cfg.SpoolDir, reads or creates the producer id there, works out the next
// batch seq (asking the stream for the producer's last batch when NATS is
// connected, for at most two seconds) and returns a Publisher; nothing is
// published until Run. A nil log discards the Publisher's log lines.
func NewPublisher(js jetstream.JetStream, cfg Config, log *slog.Logger) (*Publisher, error) {
	if js == nil {
		return nil, errors.New("new usage publisher: nil jetstream")
	}
	if cfg.SpoolDir == "" {
		return nil, errors.New("new usage publisher: spool dir required")
	}
	cfg = cfg.withDefaults()
	if mp := js.Conn().MaxPayload(); mp > 2*payloadHeadroom {
		// A batch over the server's limit could never be published.
		cfg.BatchBytes = min(cfg.BatchBytes, int(mp)-payloadHeadroom)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sp, err := openSpool(cfg.SpoolDir, cfg.SpoolMaxBytes)
	if err != nil {
		return nil, fmt.Errorf("new usage publisher: %w", err)
	}
	if n := sp.torn.Load(); n > 0 {
		log.Warn("usage spool had a torn record, moved aside", "dir", cfg.SpoolDir, "records", n)
	}
	num, low, err := openProducer(js, sp, cfg.SpoolDir)
	if err != nil {
		_ = sp.close()
		return nil, fmt.Errorf("new usage publisher: %w", err)
	}
	jn, found, err := openJournal(cfg.SpoolDir)
	if err != nil {
		_ = num.f.Close()
		_ = sp.close()
		return nil, fmt.Errorf("new usage publisher: %w", err)
	}
	log.Info("usage producer", "producer_id", num.id, "next_seq", num.last+1, "resumed", num.resumed)
	p := &Publisher{
		num:       num,
		spoolLow:  low,
		js:        js,
		nc:        js.Conn(),
		cfg:       cfg,
		log:       log,
		ch:        make(chan *usagev1.UsageEvent, cfg.Buffer),
		wake:      make(chan struct{}, 1),
		batchFull: make(chan struct{}, 1),
		closeReq:  make(chan context.Context, 1),
		done:      make(chan struct{}),
		spool:     sp,
		jch:       make(chan jentry, beginQueue),
		journal:   jn,
		found:     found,
	}
	p.batchWant.Store(math.MaxInt64)
	p.gatherUntil.Store(math.MaxInt64)
	if err := p.run.init(p); err != nil {
		_ = num.f.Close()
		_ = jn.f.Close()
		_ = sp.close()
		return nil, fmt.Errorf("new usage publisher: %w", err)
	}
	if n, err := p.run.recoverBegun(found); err != nil {
		log.Error("usage events of unfinished requests not recovered", "dir", cfg.SpoolDir, "err", err)
	} else if n > 0 {
		log.Warn("usage events recovered for requests a previous run began and never finished", "dir", cfg.SpoolDir, "events", n)
	}
	p.found = nil
	return p, nil
}

// Enqueue hands one event to the publisher. It never blocks on the network
// or the disk: it puts the pointer on the queue, or, when the queue is full,
// on the overflow list that Run moves to the spool. Only when the spool is
// full too (or Run has fallen so far behind that the overflow list holds
// Buffer events as well) does it fail: with ErrFull under
// Config.FailClosed, else by dropping the event (counted in Stats.Dropped)
// and returning nil. Once Enqueue returns nil the publisher owns ev: the
// caller must neither modify nor read it, since an event whose batch the
// stream acknowledged is reset and returned to the message pool
// (usagev1.UsageEventFromVTPool), where the next request's event may come
// from.
func (p *Publisher) Enqueue(ev *usagev1.UsageEvent) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	// The event's end, from its own fields (no clock read): ev is Run's
	// once it is on ch.
	end := ev.GetTimestamp() + int64(ev.GetLatencyTotalUs())*1000
	select {
	case p.ch <- ev:
		p.queued.Add(1)
		if int64(len(p.ch)) >= p.batchWant.Load() || end >= p.gatherUntil.Load() {
			select {
			case p.batchFull <- struct{}{}:
			default:
			}
		}
		return nil
	default:
	}
	return p.overflow(ev)
}

func (p *Publisher) overflow(ev *usagev1.UsageEvent) error {
	if p.spoolFull.Load() {
		return p.full()
	}
	p.omu.Lock()
	if len(p.over) >= p.cfg.Buffer {
		p.omu.Unlock()
		return p.full()
	}
	p.over = append(p.over, ev)
	p.overLen.Store(int64(len(p.over)))
	p.omu.Unlock()
	p.queued.Add(1)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

func (p *Publisher) full() error {
	if p.cfg.FailClosed {
		return ErrFull
	}
	p.dropped.Add(1)
	return nil
}

// Begin records that the upstream call of the request whose event will
// carry b.EventID begins (journal.go): if the process ends before that
// event is enqueued, its next start (or `tollctl spool recover`) bills the
// request by Recovered's rule. It never blocks: b is copied onto a bounded
// queue, or counted in Stats.BegunDropped when that is full. The record
// reaches the spool directory's page cache with Run's next write (within a
// tick, 50 ms, sooner under load: Run writes whenever an event or an ack
// wakes it), and its disk with the spool's fsync (SyncInterval).
func (p *Publisher) Begin(b *Begun) {
	if p.stopped.Load() {
		return
	}
	select {
	case p.jch <- jentry{kind: kindBegun, b: *b}:
	default:
		p.begunDropped.Add(1)
		return
	}
	// A busy Run takes the queue when anything else wakes it, or on its
	// next tick (due).
	p.wakeForBegun()
}

// Progress records that the stream of the request begun with eventID has
// relayed completionTokens so far. The gateway calls it at most every
// DefaultProgressInterval per stream; it never blocks (a full queue drops
// the report).
func (p *Publisher) Progress(eventID string, completionTokens uint64) {
	if p.stopped.Load() {
		return
	}
	select {
	case p.jch <- jentry{kind: kindProgress, tokens: completionTokens, b: Begun{EventID: eventID}}:
	default:
		return
	}
	p.wakeForBegun()
}

// wakeForBegun wakes Run for the Begin queue when it waits without its
// tick, or when the queue fills up; once until Run takes the queue.
func (p *Publisher) wakeForBegun() {
	if (p.idle.Load() || len(p.jch) >= beginQueue/2) && p.jwoken.CompareAndSwap(false, true) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// Stats returns a snapshot of the counters. It is safe to call at any time.
func (p *Publisher) Stats() Stats {
	return Stats{
		Queued:     p.queued.Load(),
		Published:  p.published.Load(),
		Spooled:    p.spooled.Load(),
		Drained:    p.drained.Load(),
		Failed:     p.failed.Load(),
		Dropped:    p.dropped.Load() + p.spool.lost.Load(),
		Torn:       p.spool.torn.Load(),
		Corrupt:    p.spool.corrupt.Load(),
		SpoolBytes: p.spool.unread.Load(),
		QueueLen:   int64(len(p.ch)) + p.overLen.Load(),
		Pending:    p.pending.Load(),

		BatchesPublished: p.batchesPublished.Load(),
		BatchesSpooled:   p.batchesSpooled.Load(),
		BatchesDrained:   p.batchesDrained.Load(),
		BatchesFailed:    p.batchesFailed.Load(),
		BatchesDropped:   p.batchesDropped.Load(),
		LastSeq:          p.lastSeq.Load(),

		Begun:        p.begun.Load(),
		BegunDropped: p.begunDropped.Load(),
		Recovered:    p.recovered.Load(),
	}
}

// ProducerID is the publisher's producer id: the prefix of its batches'
// subject (BatchSubject) and Nats-Msg-Id (BatchMsgID).
func (p *Publisher) ProducerID() string { return p.num.id }

// Run publishes queued events until Close or until ctx is cancelled, then
// returns. On Close it flushes as Close describes; on cancellation it writes
// whatever is still in memory to the spool without waiting on NATS. It
// returns nil on a clean stop, and an error if the spool could not be
// synced and closed. Run after Close returns nil at once (Close did the
// work); a second concurrent Run is an error.
func (p *Publisher) Run(ctx context.Context) error {
	p.life.Lock()
	switch p.state {
	case stateRunning:
		p.life.Unlock()
		return errors.New("run usage publisher: already running")
	case stateDone:
		p.life.Unlock()
		return nil
	}
	p.state = stateRunning
	p.life.Unlock()
	defer close(p.done)
	return p.run.loop(ctx, nil)
}

// Close stops taking events (Enqueue returns ErrClosed from then on),
// publishes what is still queued (to NATS if it is up and the spool is
// empty, else to the spool, which the next start drains), waits for the
// outstanding acks, spooling events whose publish failed, and fsyncs the
// spool. When ctx ends first, the events still in memory or
// awaiting an ack are written to the spool at once. Close works whether or
// not Run was started, and returns once the spool is closed.
func (p *Publisher) Close(ctx context.Context) error {
	p.life.Lock()
	switch p.state {
	case stateIdle:
		p.state = stateDone
		p.life.Unlock()
		defer close(p.done)
		return p.run.loop(context.Background(), ctx)
	case stateRunning:
		p.life.Unlock()
		select {
		case p.closeReq <- ctx:
		default: // a Close is already under way
		}
	default:
		p.life.Unlock()
	}
	<-p.done
	return p.run.closeErr
}

// shut marks the publisher closed: once it returns, no Enqueue is adding to
// the queue or the overflow list.
func (p *Publisher) shut() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stopped.Store(true)
}

// takeOverflow moves the overflow list into dst.
func (p *Publisher) takeOverflow(dst []*usagev1.UsageEvent) []*usagev1.UsageEvent {
	if p.overLen.Load() == 0 {
		return dst
	}
	p.omu.Lock()
	dst = append(dst, p.over...)
	clear(p.over)
	p.over = p.over[:0]
	p.overLen.Store(0)
	p.omu.Unlock()
	return dst
}

// Saturated reports whether Enqueue would refuse an event now: the
// publisher fails closed and both the memory queue and the spool are full.
// The gateway checks it before serving, so a request is refused (503)
// before it costs anything rather than served and left unbilled.
func (p *Publisher) Saturated() bool {
	return p.cfg.FailClosed && p.spoolFull.Load() && len(p.ch) == cap(p.ch)
}
