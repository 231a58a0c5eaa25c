package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/tollgate/tollgate/pkg/replay"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// tally is a count of requests and their cost.
type tally struct {
	n    int64
	cost int64
}

func (t *tally) add(cost int64) {
	t.n++
	t.cost += cost
}

// streamCount is what the stream holds in the window.
type streamCount struct {
	unique, raw, dept, served tally
	recovered                 tally // events of requests a killed gateway began (UsageEvent.recovered)
	legacyDups                int64 // legacy single-event messages of an event id already counted
	undecodable               int
	first, last               uint64
	seen                      map[string]struct{}
	batches                   replay.Stats // the batch figures of the whole read
}

func (c *streamCount) take(it *replay.Item) {
	ev := it.Event
	if c.first == 0 {
		c.first = it.Seq
	}
	c.last = it.Seq
	c.raw.add(ev.CostNanoUsd)
	if it.Duplicate {
		return // a republished batch: the consumers skip it too
	}
	if _, dup := c.seen[ev.EventId]; dup {
		if it.Producer == "" {
			c.legacyDups++
		}
		return
	}
	c.seen[ev.EventId] = struct{}{}
	c.unique.add(ev.CostNanoUsd)
	if ev.Dept != "" {
		c.dept.add(ev.CostNanoUsd)
	}
	if servedUpstream(ev) {
		c.served.add(ev.CostNanoUsd)
	}
	if ev.Recovered {
		c.recovered.add(ev.CostNanoUsd)
	}
}

// servedUpstream reports whether the event was billed from an upstream
// answer's own usage: what the mock's ledger counts as served.
func servedUpstream(ev *usagev1.UsageEvent) bool {
	return ev.StatusCode == 200 && ev.Attempts > 0 && !ev.Estimated && !ev.ClientAborted && !ev.CacheHit
}

// readStream counts the stream's events in the window.
func readStream(ctx context.Context, src *Sources, o *Options, w window) (*streamCount, error) {
	c := &streamCount{seen: map[string]struct{}{}}
	ro := replay.Options{Stream: src.Stream, Batch: 2000, Duplicates: true}
	if !w.openLo {
		ro.Since = o.Since.Add(-o.Skew)
	}
	// The stream is read to its end, since an event of the window may be
	// stored any time later (a spool drain); the sink filters by event time.
	sink := &windowSink{w: w, c: c}
	st, err := replay.Run(ctx, src.JetStream, ro, sink)
	if err != nil && !errors.Is(err, replay.ErrEmptyRange) {
		return nil, fmt.Errorf("read the usage stream: %w", err)
	}
	c.undecodable = st.Undecodable
	c.batches = st
	return c, nil
}

// windowSink hands the events of the window to a streamCount.
type windowSink struct {
	w window
	c *streamCount
}

func (s *windowSink) Write(_ context.Context, items []replay.Item) error {
	for i := range items {
		if s.w.contains(items[i].Event.Timestamp) {
			s.c.take(&items[i])
		}
	}
	return nil
}

func (s *windowSink) Close(context.Context) error { return nil }

// source reports the count as the stream source.
func (c *streamCount) source() Source {
	return Source{Name: SourceStream, Requests: c.unique.n, CostNanoUSD: c.unique.cost, Extra: map[string]int64{
		"raw_requests":            c.raw.n,
		"raw_cost_nano_usd":       c.raw.cost,
		"duplicates":              c.raw.n - c.unique.n,
		"dept_requests":           c.dept.n,
		"dept_cost_nano_usd":      c.dept.cost,
		"served_requests":         c.served.n,
		"served_cost_nano_usd":    c.served.cost,
		"recovered_requests":      c.recovered.n,
		"recovered_cost_nano_usd": c.recovered.cost,
		"undecodable":             int64(c.undecodable),
		"duplicate_batches":       int64(c.batches.DuplicateBatches),
		"legacy_duplicates":       c.legacyDups,
		"lost_batches":            int64(c.batches.LostBatches),
		"missing_batches":         int64(c.batches.MissingBatches),
		"first_seq":               int64(c.first),
		"last_seq":                int64(c.last),
	}}
}
