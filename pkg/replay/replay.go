// Package replay reads a range of the usage stream TOLLGATE_USAGE again and
// hands the events to a Sink: ClickHouse (usage_events, or
// usage_events_repriced when re-pricing), the spend totals in the KV bucket,
// or NDJSON. It is the engine of `tollctl replay`.
//
// A range is a stream-sequence range (FromSeq..ToSeq) or a time range
// (Since..Until) of the times the stream stored the messages, which follow
// the requests' own times within the gateway's publish delay (seconds, or
// longer after a spool drain). Reading starts at the first message of the
// range and ends at its last, or at the stream's last message as it was when
// Run started, so a replay always ends.
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
	"google.golang.org/protobuf/proto"

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
	// FirstSeq and LastSeq are the first and last sequences read.
	FirstSeq, LastSeq uint64
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
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case !o.Since.IsZero():
		since := o.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	case o.FromSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, o.FromSeq
	}
	oc, err := js.OrderedConsumer(ctx, o.Stream, cfg)
	if err != nil {
		return st, fmt.Errorf("read stream %s: %w", o.Stream, err)
	}
	r := reader{o: o, end: end, first: max(o.FromSeq, info.State.FirstSeq), start: time.Now(), st: &st}
	if err := r.run(ctx, oc, sink); err != nil {
		return st, err
	}
	if st.Events == 0 && st.Undecodable == 0 {
		return st, ErrEmptyRange
	}
	if err := sink.Close(ctx); err != nil {
		return st, err
	}
	return st, nil
}

type reader struct {
	o     Options
	end   uint64
	first uint64
	start time.Time
	st    *Stats
	items []Item
	done  bool
}

func (r *reader) run(ctx context.Context, oc jetstream.Consumer, sink Sink) error {
	for !r.done {
		next := r.first // the lowest sequence the next message can have
		if r.st.LastSeq > 0 {
			next = r.st.LastSeq + 1
		}
		n := int(min(uint64(r.o.Batch), r.end-next+1)) // no wait for messages past the end
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

// take adds one message to r.items, or marks the end of the range.
func (r *reader) take(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	seq := md.Sequence.Stream
	if seq > r.end || (r.o.FromSeq > 0 && seq < r.o.FromSeq) {
		r.done = r.done || seq > r.end
		return
	}
	if !r.o.Until.IsZero() && !md.Timestamp.Before(r.o.Until) {
		r.done = true
		return
	}
	if r.st.FirstSeq == 0 {
		r.st.FirstSeq = seq
	}
	r.st.LastSeq = seq
	if seq == r.end {
		r.done = true
	}
	ev := &usagev1.UsageEvent{}
	if err := proto.Unmarshal(m.Data(), ev); err != nil {
		r.st.Undecodable++
		return
	}
	it := Item{Seq: seq, Stored: md.Timestamp, Event: ev, OriginalCost: ev.CostNanoUsd, OriginalVersion: ev.PricingVersion}
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

// Reprice sets ev's cost and pricing_version from table t and reports
// whether t has a price for the event's served (else requested) model.
func Reprice(ev *usagev1.UsageEvent, t *pricing.Table) bool {
	p, ok := t.Lookup(ev.ServedModel)
	if !ok {
		if p, ok = t.Lookup(ev.RequestedModel); !ok {
			return false
		}
	}
	ev.CostNanoUsd = p.Cost(pricing.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens,
		CachedTokens: ev.CachedTokens, ReasoningTokens: ev.ReasoningTokens})
	ev.PricingVersion = t.Version
	return true
}
