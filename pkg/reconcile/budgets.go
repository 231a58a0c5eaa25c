package reconcile

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// readBudgets sums the global and the dept spend totals of the window's
// whole periods: the all-time totals of an unbounded window, else the day
// totals of its days.
func readBudgets(ctx context.Context, js jetstream.JetStream, w window) (Source, error) {
	kv, err := js.KeyValue(ctx, budget.Bucket)
	if err != nil {
		return Source{}, fmt.Errorf("open bucket %s: %w", budget.Bucket, err)
	}
	period := "day.*"
	if w.unbounded() {
		period = "total._"
	}
	var global, dept tally
	var totals int64
	for _, pattern := range []string{"global._." + period, "dept.*." + period} {
		entries, err := latest(ctx, kv, pattern)
		if err != nil {
			return Source{}, err
		}
		for key, val := range entries {
			id, err := budget.ParseKey(key)
			if err != nil {
				continue // not a spend total
			}
			if id.Period == budget.PeriodDay && !w.hasDay(int64(id.Start)) {
				continue
			}
			var t usagev1.SpendTotal
			if err := proto.Unmarshal(val, &t); err != nil {
				return Source{}, fmt.Errorf("decode spend total %s: %w", key, err)
			}
			totals++
			sum := &global
			if id.Scope == budget.ScopeDept {
				sum = &dept
			}
			sum.n += int64(t.Requests)
			sum.cost += t.CostNanoUsd
		}
	}
	return Source{Name: SourceBudgets, Requests: global.n, CostNanoUSD: global.cost, Extra: map[string]int64{
		"dept_requests":      dept.n,
		"dept_cost_nano_usd": dept.cost,
		"totals":             totals,
	}}, nil
}

// latest returns the current value of every key matching pattern.
func latest(ctx context.Context, kv jetstream.KeyValue, pattern string) (map[string][]byte, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wt, err := kv.Watch(wctx, pattern, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read spend totals %s: %w", pattern, err)
	}
	defer wt.Stop()
	out := map[string][]byte{}
	revs := map[string]uint64{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read spend totals %s: %w", pattern, ctx.Err())
		case e, ok := <-wt.Updates():
			if !ok {
				return nil, fmt.Errorf("read spend totals %s: watch closed", pattern)
			}
			if e == nil {
				return out, nil // the initial values are all in
			}
			if e.Revision() >= revs[e.Key()] {
				out[e.Key()], revs[e.Key()] = e.Value(), e.Revision()
			}
		}
	}
}
