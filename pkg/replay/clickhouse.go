package replay

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

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

// Write inserts the events not yet stored.
func (c *ClickHouse) Write(ctx context.Context, items []Item) error {
	stored, err := c.stored(ctx, items)
	if err != nil {
		return err
	}
	table, cols := "usage_events", eventColumns
	if c.repriced {
		table, cols = "usage_events_repriced", repricedColumns
	}
	b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+cols+")")
	if err != nil {
		return fmt.Errorf("prepare insert into %s: %w", table, err)
	}
	defer b.Abort()
	now := c.now().UTC().Truncate(time.Second)
	n := 0
	seen := make(map[string]bool, len(items))
	for i := range items {
		it := &items[i]
		if stored[it.Event.EventId] || seen[it.Event.EventId] {
			c.Skipped++
			continue
		}
		seen[it.Event.EventId] = true
		if c.repriced {
			err = b.Append(repricedRow(it, now)...)
		} else {
			err = b.Append(eventRow(it, now)...)
		}
		if err != nil {
			return fmt.Errorf("append event %d: %w", it.Seq, err)
		}
		n++
	}
	if n == 0 {
		return nil
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert into %s: %w", table, err)
	}
	c.Inserted += n
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
	q := "SELECT event_id FROM usage_events WHERE ts >= toDateTime(?) AND ts <= toDateTime(?) AND has(?, event_id)"
	args := []any{lo, hi, ids}
	if c.repriced {
		q = "SELECT event_id FROM usage_events_repriced WHERE pricing_version = ? AND ts >= toDateTime(?) AND ts <= toDateTime(?) AND has(?, event_id)"
		args = []any{items[0].Event.PricingVersion, lo, hi, ids}
	}
	rows, err := c.conn.Query(ctx, q, args...)
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

const eventColumns = `event_id, request_id, ts, ts_ms, issuer, subject, key_id, dept, team, project,
requested_model, served_model, provider, deployment, attempts, fallbacks, route,
prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, estimated, cost_nano_usd, pricing_version,
endpoint, stream, status_code, error_type, client_aborted, latency_total_us, ttft_us, upstream_us, overhead_us,
cache_hit, degradation_step, clamped_max_tokens, stream_seq, ingested_at,
budget_scope, budget_value, budget_period, budget_period_start, budget_from_token,
budget_limit_nano_usd, budget_spent_nano_usd, budget_reserved_nano_usd, budget_headroom_nano_usd,
hedged, units, unit`

const repricedColumns = `event_id, request_id, ts, dept, team, project, subject, key_id, served_model, provider,
prompt_tokens, completion_tokens, cached_tokens, cost_nano_usd, pricing_version,
original_cost_nano_usd, original_pricing_version, stream_seq, repriced_at`

// evTime is the event's time in whole Unix seconds, as stored in ts.
func evTime(e interface{ GetTimestamp() int64 }) uint32 {
	s := e.GetTimestamp() / int64(time.Second)
	if s < 0 {
		return 0
	}
	return uint32(min(s, math.MaxUint32))
}

func flag(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func eventRow(it *Item, now time.Time) []any {
	e := it.Event
	fb := e.Fallbacks
	if fb == nil {
		fb = []string{}
	}
	ms := e.Timestamp / int64(time.Millisecond)
	b := budgetRows(e)
	return []any{e.EventId, e.RequestId, time.Unix(int64(evTime(e)), 0).UTC(), uint64(max(ms, 0)), e.Issuer, e.Subject, e.KeyId, e.Dept, e.Team, e.Project,
		e.RequestedModel, e.ServedModel, e.Provider, e.Deployment, e.Attempts, fb, e.Route,
		e.PromptTokens, e.CompletionTokens, e.CachedTokens, e.ReasoningTokens, flag(e.Estimated), e.CostNanoUsd, e.PricingVersion,
		e.Endpoint, flag(e.Stream), e.StatusCode, e.ErrorType, flag(e.ClientAborted), e.LatencyTotalUs, e.TtftUs, e.UpstreamUs, e.OverheadUs,
		flag(e.CacheHit), e.DegradationStep, e.ClampedMaxTokens, it.Seq, now,
		b.scope, b.value, b.period, b.start, b.fromToken, b.limit, b.spent, b.reserved, b.headroom,
		flag(e.Hedged), e.Units, e.Unit}
}

// budgetArrays are an event's budgets checked as the parallel budget_*
// columns.
type budgetArrays struct {
	scope, value, period, start      []string
	fromToken                        []uint8
	limit, spent, reserved, headroom []int64
}

func budgetRows(e *usagev1.UsageEvent) budgetArrays {
	n := len(e.Budgets)
	b := budgetArrays{
		scope: make([]string, 0, n), value: make([]string, 0, n), period: make([]string, 0, n), start: make([]string, 0, n),
		fromToken: make([]uint8, 0, n), limit: make([]int64, 0, n), spent: make([]int64, 0, n),
		reserved: make([]int64, 0, n), headroom: make([]int64, 0, n),
	}
	for _, c := range e.Budgets {
		b.scope, b.value = append(b.scope, c.Scope), append(b.value, c.Value)
		b.period, b.start = append(b.period, c.Period), append(b.start, c.PeriodStart)
		b.fromToken = append(b.fromToken, flag(c.FromToken))
		b.limit, b.spent = append(b.limit, c.LimitNanoUsd), append(b.spent, c.SpentNanoUsd)
		b.reserved, b.headroom = append(b.reserved, c.ReservedNanoUsd), append(b.headroom, c.HeadroomNanoUsd)
	}
	return b
}

func repricedRow(it *Item, now time.Time) []any {
	e := it.Event
	return []any{e.EventId, e.RequestId, time.Unix(int64(evTime(e)), 0).UTC(), e.Dept, e.Team, e.Project, e.Subject, e.KeyId, e.ServedModel, e.Provider,
		e.PromptTokens, e.CompletionTokens, e.CachedTokens, e.CostNanoUsd, e.PricingVersion,
		it.OriginalCost, it.OriginalVersion, it.Seq, now}
}
