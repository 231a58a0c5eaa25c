package replay

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/chstore"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// ClickHouse writes replayed events to ClickHouse, idempotently: before
// each insert it looks up which of the batch's event ids are already stored
// and inserts only the others, so replaying a range twice changes nothing,
// not even the rollups (whose materialized views count every inserted row).
//
// Without re-pricing the rows go to usage_events, exactly as the loader
// writes them (stream_seq is the replayed sequence). With Repriced set they
// go to usage_events_repriced, keyed by pricing_version, next to the
// original cost and version (migration 0004); usage_events is never changed.
type ClickHouse struct {
	conn     driver.Conn
	repriced bool
	now      func() time.Time
	// Inserted and Skipped count rows written and rows already stored.
	Inserted, Skipped int
}

// NewClickHouse returns a sink writing through conn, whose default
// database holds the chstore schema.
func NewClickHouse(conn driver.Conn, repriced bool) *ClickHouse {
	return &ClickHouse{conn: conn, repriced: repriced, now: time.Now}
}

// Write inserts the events not yet stored: into usage_events with the
// loader's own columns (chstore.InsertEvents), or re-priced into
// usage_events_repriced.
func (c *ClickHouse) Write(ctx context.Context, items []Item) error {
	stored, err := c.stored(ctx, items)
	if err != nil {
		return err
	}
	now := c.now().UTC().Truncate(time.Second)
	fresh := make([]*Item, 0, len(items))
	seen := make(map[string]bool, len(items))
	for i := range items {
		it := &items[i]
		if stored[it.Event.EventId] || seen[it.Event.EventId] {
			c.Skipped++
			continue
		}
		seen[it.Event.EventId] = true
		fresh = append(fresh, it)
	}
	if len(fresh) == 0 {
		return nil
	}
	if c.repriced {
		err = c.writeRepriced(ctx, fresh, now)
	} else {
		events, seqs := make([]*usagev1.UsageEvent, len(fresh)), make([]uint64, len(fresh))
		for i, it := range fresh {
			events[i], seqs[i] = it.Event, it.Seq
		}
		err = chstore.InsertEvents(ctx, c.conn, events, seqs, now)
	}
	if err != nil {
		return err
	}
	c.Inserted += len(fresh)
	return nil
}

// writeRepriced inserts re-priced copies of items into usage_events_repriced.
func (c *ClickHouse) writeRepriced(ctx context.Context, items []*Item, now time.Time) error {
	b, err := c.conn.PrepareBatch(ctx, chsql.InsertRepriced.SQL)
	if err != nil {
		return fmt.Errorf("prepare insert into usage_events_repriced: %w", err)
	}
	defer b.Abort()
	for _, it := range items {
		if err := b.Append(repricedRow(it, now)...); err != nil {
			return fmt.Errorf("append event %d: %w", it.Seq, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert into usage_events_repriced: %w", err)
	}
	return nil
}

// stored returns the batch's event ids already in the target table (for
// the table's pricing version when re-pricing).
func (c *ClickHouse) stored(ctx context.Context, items []Item) (map[string]bool, error) {
	ids := make([]string, len(items))
	var lo, hi uint32 = math.MaxUint32, 0
	for i := range items {
		ids[i] = items[i].Event.EventId
		s := evTime(items[i].Event)
		lo, hi = min(lo, s), max(hi, s)
	}
	q, args := chsql.ReplayStored, []any{lo, hi, ids}
	if c.repriced {
		q, args = chsql.ReplayStoredRepriced, []any{items[0].Event.PricingVersion, lo, hi, ids}
	}
	rows, err := c.conn.Query(ctx, q.SQL, args...)
	if err != nil {
		return nil, fmt.Errorf("look up stored events: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("look up stored events: %w", err)
		}
		out[id] = true
	}
	return out, rows.Err()
}

// Close does nothing: every batch is written when it comes.
func (c *ClickHouse) Close(context.Context) error { return nil }

// evTime is the event's time in whole Unix seconds, as stored in ts.
func evTime(e interface{ GetTimestamp() int64 }) uint32 {
	s := e.GetTimestamp() / int64(time.Second)
	if s < 0 {
		return 0
	}
	return uint32(min(s, math.MaxUint32))
}

func repricedRow(it *Item, now time.Time) []any {
	e := it.Event
	return []any{e.EventId, e.RequestId, time.Unix(int64(evTime(e)), 0).UTC(), e.Dept, e.Team, e.Project, e.Subject, e.KeyId, e.ServedModel, e.Provider,
		e.PromptTokens, e.CompletionTokens, e.CachedTokens, e.CostNanoUsd, e.PricingVersion,
		it.OriginalCost, it.OriginalVersion, it.Seq, now}
}
