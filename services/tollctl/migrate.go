package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/replay"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// setupBudgetMigrate is `tollctl budget migrate`: rebuild the team and
// project totals, qualified by department (research/ml), from the usage
// stream, and delete the flat totals (team.ml...) written before values
// were qualified once the stream accounts for every nano-USD of them.
// Without --apply it only prints the plan.
func setupBudgetMigrate(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	nf.register(a, fs)
	apply := fs.Bool("apply", false, "write the rebuilt totals and delete the flat ones (default: print the plan only)")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		nc, js, err := nf.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		kv, err := js.KeyValue(ctx, budget.Bucket)
		if err != nil {
			return fmt.Errorf("open %s: %w", budget.Bucket, err)
		}
		m, err := loadMigration(ctx, kv)
		if err != nil {
			return err
		}
		pr := newProgress(a.stderr)
		st, err := replay.Run(ctx, js, replay.Options{Progress: pr.update}, m)
		pr.finish()
		if err != nil && !errors.Is(err, replay.ErrEmptyRange) {
			return err
		}
		m.last = st.LastSeq
		m.print(a.stdout)
		if !*apply {
			fmt.Fprintln(a.stdout, "dry run: nothing written; run again with --apply (budget service stopped) to migrate")
			return nil
		}
		return m.apply(ctx, kv, a.stdout)
	}
}

// migration is the replay sink of `budget migrate` and its plan.
type migration struct {
	// stored holds every team and project total in the bucket.
	stored map[budget.TotalID]storedTotal
	// rebuilt holds the qualified team and project totals of the stream.
	rebuilt map[budget.TotalID]*usagev1.SpendTotal
	// flat sums, per stored total, the events of the stream whose raw team
	// or project is its value, up to its as_of_seq: what a flat total
	// holds if the stream has all of its events.
	flat map[budget.TotalID]*flatSum
	last uint64
}

// storedTotal is what the migration needs of a total in the bucket.
type storedTotal struct {
	cost      int64
	reqs      uint64
	asOf, rev uint64
}

type flatSum struct {
	cost int64
	reqs uint64
	// into names the rebuilt totals its spend went to, with their share.
	into map[string]int64
}

// loadMigration reads every team and project total of kv.
func loadMigration(ctx context.Context, kv jetstream.KeyValue) (*migration, error) {
	m := &migration{stored: map[budget.TotalID]storedTotal{}, rebuilt: map[budget.TotalID]*usagev1.SpendTotal{},
		flat: map[budget.TotalID]*flatSum{}}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list spend totals: %w", err)
	}
	for k := range keys.Keys() {
		id, err := budget.ParseKey(k)
		if err != nil || (id.Scope != budget.ScopeTeam && id.Scope != budget.ScopeProject) {
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
		m.stored[id] = storedTotal{cost: t.CostNanoUsd, reqs: t.Requests, asOf: t.AsOfSeq, rev: e.Revision()}
	}
	return m, nil
}

// Write adds replayed events to the rebuilt totals and the flat sums.
func (m *migration) Write(_ context.Context, items []replay.Item) error {
	for i := range items {
		e, seq := items[i].Event, items[i].Seq
		vals := budget.ScopeValues(e.KeyId, e.Subject, e.Dept, e.Team, e.Project)
		raw := [budget.NumScopes]string{budget.ScopeTeam: e.Team, budget.ScopeProject: e.Project}
		starts := budget.PeriodStarts(e.Timestamp)
		for _, sc := range []budget.Scope{budget.ScopeTeam, budget.ScopeProject} {
			if vals[sc] == "" {
				continue
			}
			for p := range budget.Period(budget.NumPeriods) {
				id := budget.TotalID{Scope: sc, Value: vals[sc], Period: p, Start: starts[p]}
				t := m.rebuilt[id]
				if t == nil {
					t = &usagev1.SpendTotal{Scope: sc.String(), Value: id.Value, Period: p.String(), PeriodStart: id.PeriodStart()}
					m.rebuilt[id] = t
				}
				t.CostNanoUsd += e.CostNanoUsd
				t.PromptTokens += e.PromptTokens
				t.CompletionTokens += e.CompletionTokens
				t.Requests++
				fid := budget.TotalID{Scope: sc, Value: raw[sc], Period: p, Start: starts[p]}
				if old, ok := m.stored[fid]; ok && seq <= old.asOf {
					f := m.flat[fid]
					if f == nil {
						f = &flatSum{into: map[string]int64{}}
						m.flat[fid] = f
					}
					f.cost += e.CostNanoUsd
					f.reqs++
					f.into[id.Value] += e.CostNanoUsd
				}
			}
		}
	}
	return nil
}

// Close is a no-op: the plan is printed and applied by the command.
func (m *migration) Close(context.Context) error { return nil }

// deletable reports whether a stored total is a flat one (not rebuilt from
// the stream) whose spend the stream fully accounts for.
func (m *migration) deletable(id budget.TotalID, st storedTotal) (flat, covered bool) {
	if _, ok := m.rebuilt[id]; ok {
		return false, false
	}
	f := m.flat[id]
	if f == nil {
		return true, st.cost == 0 && st.reqs == 0
	}
	return true, f.cost == st.cost && f.reqs == st.reqs
}

func sortedIDs[V any](m map[budget.TotalID]V) []budget.TotalID {
	ids := make([]budget.TotalID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Key() < ids[j].Key() })
	return ids
}

// print writes the plan: every total written, every flat total deleted or
// kept, and a summary line.
func (m *migration) print(w io.Writer) {
	for _, id := range sortedIDs(m.rebuilt) {
		t := m.rebuilt[id]
		old := "new"
		if st, ok := m.stored[id]; ok {
			old = "was " + pricing.FormatUSD(st.cost)
		}
		fmt.Fprintf(w, "write  %s  %s USD (%s)\n", label(id), pricing.FormatUSD(t.CostNanoUsd), old)
	}
	var del, keep int
	var kept int64
	for _, id := range sortedIDs(m.stored) {
		st := m.stored[id]
		flat, covered := m.deletable(id, st)
		switch {
		case !flat:
		case covered:
			del++
			fmt.Fprintf(w, "delete %s  %s USD, now in %s\n", label(id), pricing.FormatUSD(st.cost), m.flat[id].shares())
		default:
			keep++
			var found int64
			if f := m.flat[id]; f != nil {
				found = f.cost
			}
			kept += st.cost - found
			fmt.Fprintf(w, "keep   %s  %s USD, of which %s USD are not in the stream (department unknown)\n",
				label(id), pricing.FormatUSD(st.cost), pricing.FormatUSD(st.cost-found))
		}
	}
	fmt.Fprintf(w, "%d qualified totals to write (as of stream seq %d), %d flat totals to delete, %d kept (%s USD not in the stream)\n",
		len(m.rebuilt), m.last, del, keep, pricing.FormatUSD(kept))
}

// label names a total for people: "team research/ml month 2026-11".
func label(id budget.TotalID) string {
	s := id.Scope.String() + " " + id.Value + " " + id.Period.String()
	if id.Period != budget.PeriodTotal {
		s += " " + id.PeriodStart()
	}
	return s
}

// shares lists where a flat total's spend went: "research/ml 1.5, finance/ml 2".
func (f *flatSum) shares() string {
	if f == nil {
		return "nothing (it was empty)"
	}
	vals := make([]string, 0, len(f.into))
	for v := range f.into {
		vals = append(vals, v)
	}
	sort.Strings(vals)
	s := ""
	for i, v := range vals {
		if i > 0 {
			s += ", "
		}
		s += v + " " + pricing.FormatUSD(f.into[v])
	}
	return s
}

// apply writes the rebuilt totals with as_of_seq = the last replayed
// sequence (so the budget consumer adds only later events), then deletes
// the flat totals the stream accounts for. A total the consumer wrote past
// the replay stops it with replay.ErrConsumerAhead.
func (m *migration) apply(ctx context.Context, kv jetstream.KeyValue, w io.Writer) error {
	for _, id := range sortedIDs(m.rebuilt) {
		t := m.rebuilt[id]
		t.AsOfSeq = m.last
		data, err := proto.Marshal(t)
		if err != nil {
			return fmt.Errorf("encode total %s: %w", id.Key(), err)
		}
		st, ok := m.stored[id]
		switch {
		case !ok:
			_, err = kv.Create(ctx, id.Key(), data)
		case st.asOf > m.last:
			return fmt.Errorf("%w: %s as of %d, replay ends at %d (stop the budget service and run again)",
				replay.ErrConsumerAhead, id.Key(), st.asOf, m.last)
		default:
			_, err = kv.Update(ctx, id.Key(), data, st.rev)
		}
		if err != nil {
			return fmt.Errorf("write total %s (is the budget service stopped?): %w", id.Key(), err)
		}
	}
	deleted := 0
	for _, id := range sortedIDs(m.stored) {
		st := m.stored[id]
		if flat, covered := m.deletable(id, st); !flat || !covered {
			continue
		}
		if err := kv.Delete(ctx, id.Key(), jetstream.LastRevision(st.rev)); err != nil {
			return fmt.Errorf("delete flat total %s (is the budget service stopped?): %w", id.Key(), err)
		}
		deleted++
	}
	_, err := fmt.Fprintf(w, "migrated: %d qualified totals written, %d flat totals deleted\n", len(m.rebuilt), deleted)
	return err
}
