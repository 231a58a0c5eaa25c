package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/replay"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// scopeDrift is one scope's line of `tollctl reconcile --by-scope`: the
// spend the gateways published to the stream against the spend the budget
// service applied to the all-time totals, summed over the scope's values.
type scopeDrift struct {
	Scope string `json:"scope"`
	// StreamNano is the cost of every stream event with a value of the
	// scope; AppliedNano the sum of the scope's all-time totals.
	StreamNano  int64 `json:"stream_nano_usd"`
	AppliedNano int64 `json:"applied_nano_usd"`
	// UnappliedNano is StreamNano - AppliedNano: what the gateways counted
	// that the totals (and so the other gateways) do not hold yet. It is
	// the budget consumer's lag; below zero, the totals count more than the
	// stream holds (flat totals not migrated, or events lost from the
	// stream by its retention).
	UnappliedNano int64 `json:"unapplied_nano_usd"`
}

// driftSink sums replayed events per scope.
type driftSink struct{ sums [budget.NumScopes]int64 }

func (d *driftSink) Write(_ context.Context, items []replay.Item) error {
	for i := range items {
		e := items[i].Event
		vals := budget.ScopeValues(e.KeyId, e.Subject, e.Dept, e.Team, e.Project)
		for sc := range budget.Scope(budget.NumScopes) {
			if sc == budget.ScopeGlobal || vals[sc] != "" {
				d.sums[sc] += e.CostNanoUsd
			}
		}
	}
	return nil
}

func (d *driftSink) Close(context.Context) error { return nil }

// measureDrift reads the applied all-time totals first, then the whole
// stream, so that an event published in between makes the figure larger
// (lag), never negative.
func measureDrift(ctx context.Context, js jetstream.JetStream, stream string) ([]scopeDrift, error) {
	kv, err := js.KeyValue(ctx, budget.Bucket)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", budget.Bucket, err)
	}
	var applied [budget.NumScopes]int64
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list spend totals: %w", err)
	}
	for k := range keys.Keys() {
		id, err := budget.ParseKey(k)
		if err != nil || id.Period != budget.PeriodTotal {
			continue
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read total %s: %w", k, err)
		}
		var t usagev1.SpendTotal
		if err := proto.Unmarshal(e.Value(), &t); err != nil {
			return nil, fmt.Errorf("decode total %s: %w", k, err)
		}
		applied[id.Scope] += t.CostNanoUsd
	}
	var d driftSink
	if _, err := replay.Run(ctx, js, replay.Options{Stream: stream}, &d); err != nil && !errors.Is(err, replay.ErrEmptyRange) {
		return nil, err
	}
	out := make([]scopeDrift, 0, budget.NumScopes)
	for sc := range budget.Scope(budget.NumScopes) {
		out = append(out, scopeDrift{Scope: sc.String(), StreamNano: d.sums[sc], AppliedNano: applied[sc],
			UnappliedNano: d.sums[sc] - applied[sc]})
	}
	return out, nil
}

// writeDrift prints the per-scope figures as a table.
func writeDrift(w io.Writer, drift []scopeDrift) {
	fmt.Fprintf(w, "\nspend by scope, all time (unapplied = in the stream, not yet in the totals):\n")
	fmt.Fprintf(w, "%-8s  %20s  %20s  %20s\n", "SCOPE", "STREAM USD", "APPLIED USD", "UNAPPLIED USD")
	for _, d := range drift {
		fmt.Fprintf(w, "%-8s  %20s  %20s  %20s\n", d.Scope, pricing.FormatUSD(d.StreamNano), pricing.FormatUSD(d.AppliedNano),
			pricing.FormatUSD(d.UnappliedNano))
	}
}
