// Package replay reads a range of the usage stream TOLLGATE_USAGE again and
// hands the events to a Sink: ClickHouse (usage_events, or
// usage_events_repriced when re-pricing), the spend totals in the KV bucket,
// or NDJSON. It is the engine of `tollctl replay`.
//
// A range is a stream-sequence range (FromSeq..ToSeq) or a time range
// (Since..Until) of the times the stream stored the messages, which follow
// the requests' own times within the gateway's publish delay (seconds, or
// longer after a spool drain). Reading ends at the range's last message,
// or at the stream's last message as it was when Run started, so a replay
// always ends.
//
// Events travel in batches per producer (usage.UsageBatch), and a batch
// republished after the stream's duplicate window is stored twice. A
// replay hands each batch's events to the sink once, at the batch's first
// appearance in the stream (usage.Applier, as the budget consumer
// decides): so that the decision on a message in the range is the one the
// budget consumer made, the messages before the range are read too (from
// the stream's first message) and only fed to the Applier. Legacy
// single-event messages are handed over each time they are stored.
//
// With a price table (Options.Reprice) each event's cost is recomputed from
// its tokens with the price of its served model (or, failing that, its
// requested model) and its pricing_version set to the table's Version;
// events of models the table lacks keep their cost and are counted as
// unpriced.
package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// ErrEmptyRange is returned by Run when the range holds no message.
var ErrEmptyRange = errors.New("no events in range")

// Item is one replayed event.
type Item struct {
	// Seq is the event's stream sequence.
	Seq uint64
	// Stored is when the stream stored the message.
	Stored time.Time
	// Event is the decoded event, re-priced when Options.Reprice is set.
	Event *usagev1.UsageEvent
	// OriginalCost and OriginalVersion are the event's cost (nano-USD) and
	// pricing_version as published.
	OriginalCost    int64
	OriginalVersion string
	// Producer and Batch name the event's batch; empty and 0 for a legacy
	// single-event message.
	Producer string
	Batch    uint64
	// Duplicate marks an event of a batch the stream held earlier (only
	// with Options.Duplicates).
	Duplicate bool
}

// Sink receives replayed events in stream order, a batch at a time, and is
// closed once after the last batch (Close finishes the sink's work, e.g.
// writes the totals; it is not called when Run fails).
type Sink interface {
	Write(ctx context.Context, items []Item) error
	Close(ctx context.Context) error
}

// Options configure Run.
type Options struct {
	// Stream to read. Default usage.StreamName.
	Stream string
	// FromSeq and ToSeq bound the range by stream sequence, inclusive; 0
	// means the stream's first or last message.
	FromSeq, ToSeq uint64
	// Since and Until bound the range by stored time, [Since, Until); zero
	// means unbounded. They combine with FromSeq/ToSeq.
	Since, Until time.Time
	// Reprice, when set, recomputes each event's cost with this table.
	Reprice *pricing.Table
	// Batch is how many events a Sink.Write gets at most. Default 1000.
	Batch int
	// Progress, when set, is called after each batch.
	Progress func(Progress)
	// Duplicates hands the sink the events of republished batches too,
	// marked Item.Duplicate (reconcile counts them); by default they are
	// skipped and counted in Stats.
	Duplicates bool
}

// Progress reports how far a replay got. Total is the number of stream
// sequences in the range (deleted messages included), so Done/Total is the
// fraction done; Total is 0 until the first message is read.
type Progress struct {
	Done, Total uint64
	Elapsed     time.Duration
}

// Stats sum up a finished replay.
type Stats struct {
	// Events handed to the sink; Undecodable were skipped.
	Events, Undecodable int
	// Repriced events got a new cost; Unpriced kept theirs (no price).
	Repriced, Unpriced int
	// FirstSeq and LastSeq are the first and last sequences of the range
	// read.
	FirstSeq, LastSeq uint64
	// Batches in the range applied; DuplicateBatches (holding
	// DuplicateEvents) skipped as republished.
	Batches, DuplicateBatches, DuplicateEvents int
	// LostBatches were given up in the range: a producer's window moved
	// past them before they arrived (usage.Window.Apply). MissingBatches
	// had not arrived at the end: below some later batch of their producer
	// (still in a spool, or lost).
	LostBatches, MissingBatches uint64
}

// Run replays the range of o into sink and closes the sink.
func Run(ctx context.Context, js jetstream.JetStream, o Options, sink Sink) (Stats, error) {
	if o.Stream == "" {
		o.Stream = usage.StreamName
	}
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	var st Stats
	s, err := js.Stream(ctx, o.Stream)
	if err != nil {
		return st, fmt.Errorf("open stream %s: %w", o.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return st, fmt.Errorf("stream info %s: %w", o.Stream, err)
	}
	end := info.State.LastSeq
	if o.ToSeq > 0 && o.ToSeq < end {
		end = o.ToSeq
	}
	if info.State.Msgs == 0 || end < max(o.FromSeq, info.State.FirstSeq) {
		return st, ErrEmptyRange
	}
	// From the stream's first message: see the package doc.
	oc, err := js.OrderedConsumer(ctx, o.Stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return st, fmt.Errorf("read stream %s: %w", o.Stream, err)
	}
	r := reader{o: o, end: end, next: info.State.FirstSeq, start: time.Now(), st: &st}
	if err := r.run(ctx, oc, sink); err != nil {
		return st, err
	}
	st.MissingBatches = r.applier.Missing()
	if st.Events == 0 && st.Undecodable == 0 {
		return st, ErrEmptyRange
	}
	if err := sink.Close(ctx); err != nil {
		return st, err
	}
	return st, nil
}

type reader struct {
	o       Options
	end     uint64
	next    uint64 // the lowest sequence the next message can have
	start   time.Time
	st      *Stats
	items   []Item
	done    bool
	inRange bool
	applier usage.Applier
	batch   usagev1.UsageBatch
}

func (r *reader) run(ctx context.Context, oc jetstream.Consumer, sink Sink) error {
	for !r.done {
		n := int(min(uint64(r.o.Batch), r.end-min(r.next, r.end)+1)) // no wait for messages past the end
		batch, err := oc.Fetch(max(n, 1), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("read stream: %w", err)
		}
		r.items = r.items[:0]
		n = 0
		for m := range batch.Messages() {
			n++
			if !r.done {
				r.take(m)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("read stream: %w", err)
		}
		if n == 0 {
			r.done = true // the range's tail was deleted
		}
		if len(r.items) > 0 {
			if err := sink.Write(ctx, r.items); err != nil {
				return err
			}
		}
		if r.o.Progress != nil && r.st.FirstSeq > 0 {
			r.o.Progress(Progress{Done: r.st.LastSeq - r.st.FirstSeq + 1, Total: r.end - r.st.FirstSeq + 1, Elapsed: time.Since(r.start)})
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// take adds the events of one message to r.items, feeds a message before
// the range to the Applier only, or marks the end of the range.
func (r *reader) take(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	seq := md.Sequence.Stream
	r.next = seq + 1
	if seq > r.end {
		r.done = true
		return
	}
	if !r.inRange && seq >= r.o.FromSeq && (r.o.Since.IsZero() || !md.Timestamp.Before(r.o.Since)) {
		r.inRange = true
	}
	if r.inRange && !r.o.Until.IsZero() && !md.Timestamp.Before(r.o.Until) {
		r.done = true
		return
	}
	if seq == r.end {
		r.done = true
	}
	b := &r.batch
	decodeErr := usage.DecodeMessage(m.Data(), b)
	var v usage.Verdict
	var lost uint64
	if decodeErr == nil {
		v, lost = r.applier.Apply(seq, b)
	}
	if !r.inRange {
		return
	}
	if r.st.FirstSeq == 0 {
		r.st.FirstSeq = seq
	}
	r.st.LastSeq = seq
	if decodeErr != nil {
		r.st.Undecodable++
		return
	}
	r.st.LostBatches += lost
	switch v {
	case usage.Repeat:
		r.st.DuplicateBatches++
		r.st.DuplicateEvents += len(b.Events)
		if !r.o.Duplicates {
			return
		}
	case usage.Fresh:
		r.st.Batches++
	}
	for _, ev := range b.Events { // DecodeMessage allocates them anew
		it := Item{Seq: seq, Stored: md.Timestamp, Event: ev, OriginalCost: ev.CostNanoUsd, OriginalVersion: ev.PricingVersion,
			Producer: b.ProducerId, Batch: b.Seq, Duplicate: v == usage.Repeat}
		if it.Duplicate {
			r.items = append(r.items, it)
			continue
		}
		if r.o.Reprice != nil {
			if Reprice(ev, r.o.Reprice) {
				r.st.Repriced++
			} else {
				r.st.Unpriced++
			}
		}
		r.st.Events++
		r.items = append(r.items, it)
	}
}

// Reprice sets ev's cost and pricing_version from table t and reports
// whether t has a price for the event: the provider's entry for its
// deployment (provider/model, Table.LookupAt), else its served model's,
// else its requested model's. Cache reads and writes are billed at their
// prices, an event's service tier at its prices, and a prompt above an
// entry's long-context size at the tier's.
func Reprice(ev *usagev1.UsageEvent, t *pricing.Table) bool {
	p, ok := t.LookupAt(ev.Provider, ev.Deployment)
	if !ok {
		if p, ok = t.Lookup(ev.ServedModel); !ok {
			if p, ok = t.Lookup(ev.RequestedModel); !ok {
				return false
			}
		}
	}
	ev.CostNanoUsd = p.Cost(pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens,
		CachedTokens: ev.CachedTokens, CacheWriteTokens: ev.CacheWriteTokens, ReasoningTokens: ev.ReasoningTokens,
		ServiceTier: pricing.ParseServiceTier(ev.ServiceTier)})
	ev.PricingVersion = t.Version
	return true
}
