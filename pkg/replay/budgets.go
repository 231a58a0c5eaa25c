package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// ErrConsumerAhead is returned by Budgets.Close when a stored total already
// includes events past the replay's last sequence: the budget consumer ran
// during the replay. Stop it, replay again, start it.
var ErrConsumerAhead = errors.New("spend total is ahead of the replay")

// Budgets recomputes, from scratch, the spend totals of one period (a UTC
// day or month): every total of that period (every scope and value) is
// rebuilt from the replayed events whose own timestamp lies in the period,
// and written to the KV bucket with as_of_seq = the last replayed stream
// sequence, replacing what was there. Totals of the period that exist in
// the bucket but got no event are written as zero. Totals of other periods
// and the all-time totals are left alone.
//
// Semantics: the replay must cover every event of the period, so run it
// from the period's start (a little earlier to catch late publishes) to the
// stream's end; the budget consumer then applies only events after
// as_of_seq on top. Run it while the budget consumer is stopped: a total it
// wrote past the replay's end makes Close fail with ErrConsumerAhead.
type Budgets struct {
	kv     jetstream.KeyValue
	period budget.Period
	start  int32
	now    func() time.Time
	totals map[budget.TotalID]*usagev1.SpendTotal
	last   uint64
	// Written counts the totals written by Close.
	Written int
}

// NewBudgets returns a sink recomputing the totals of the day or month
// (period budget.PeriodDay or budget.PeriodMonth) containing at.
func NewBudgets(kv jetstream.KeyValue, period budget.Period, at time.Time) (*Budgets, error) {
	if period != budget.PeriodDay && period != budget.PeriodMonth {
		return nil, fmt.Errorf("recompute budgets: period %s: want day or month", period)
	}
	return &Budgets{kv: kv, period: period, start: periodStart(period, at), now: time.Now,
		totals: map[budget.TotalID]*usagev1.SpendTotal{}}, nil
}

// PeriodBounds returns the UTC start and end of the day or month
// containing at.
func PeriodBounds(period budget.Period, at time.Time) (start, end time.Time) {
	at = at.UTC()
	if period == budget.PeriodDay {
		start = time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	}
	start = time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

// periodStart numbers the period as budget.TotalID.Start does.
func periodStart(p budget.Period, t time.Time) int32 {
	t = t.UTC()
	if p == budget.PeriodDay {
		return int32(t.Unix() / 86400)
	}
	return int32(t.Year()*12 + int(t.Month()) - 1)
}

// Write adds the events of the period to the totals.
func (b *Budgets) Write(_ context.Context, items []Item) error {
	for i := range items {
		e := items[i].Event
		b.last = items[i].Seq
		if periodStart(b.period, time.Unix(0, e.Timestamp)) != b.start {
			continue
		}
		vals := budget.ScopeValues(e.KeyId, e.Subject, e.Dept, e.Team, e.Project)
		for sc := range budget.Scope(budget.NumScopes) {
			v := vals[sc]
			if sc != budget.ScopeGlobal && v == "" {
				continue
			}
			id := budget.TotalID{Scope: sc, Value: v, Period: b.period, Start: b.start}
			t := b.totals[id]
			if t == nil {
				t = &usagev1.SpendTotal{Scope: sc.String(), Value: v, Period: b.period.String(), PeriodStart: id.PeriodStart()}
				b.totals[id] = t
			}
			t.CostNanoUsd += e.CostNanoUsd
			t.PromptTokens += e.PromptTokens
			t.CompletionTokens += e.CompletionTokens
			t.Requests++
		}
	}
	return nil
}

// Close writes the period's totals, zeroing those the replay did not see.
func (b *Budgets) Close(ctx context.Context) error {
	keys, err := b.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("list spend totals: %w", err)
	}
	for k := range keys.Keys() {
		id, err := budget.ParseKey(k)
		if err != nil || id.Period != b.period || id.Start != b.start {
			continue
		}
		if b.totals[id] == nil {
			b.totals[id] = &usagev1.SpendTotal{Scope: id.Scope.String(), Value: id.Value, Period: b.period.String(), PeriodStart: id.PeriodStart()}
		}
	}
	for id, t := range b.totals {
		if err := b.put(ctx, id, t); err != nil {
			return err
		}
		b.Written++
	}
	return nil
}

// put replaces one total unless the stored one is past the replay.
func (b *Budgets) put(ctx context.Context, id budget.TotalID, t *usagev1.SpendTotal) error {
	t.AsOfSeq = b.last
	t.UpdatedUnixMs = b.now().UnixMilli()
	data, err := proto.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode total %s: %w", id.Key(), err)
	}
	cur, err := b.kv.Get(ctx, id.Key())
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		_, err = b.kv.Create(ctx, id.Key(), data)
	case err != nil:
	default:
		var old usagev1.SpendTotal
		if proto.Unmarshal(cur.Value(), &old) == nil && old.AsOfSeq > b.last {
			return fmt.Errorf("%w: %s as of %d, replay ends at %d", ErrConsumerAhead, id.Key(), old.AsOfSeq, b.last)
		}
		_, err = b.kv.Update(ctx, id.Key(), data, cur.Revision())
	}
	if err != nil {
		return fmt.Errorf("write total %s: %w", id.Key(), err)
	}
	return nil
}
