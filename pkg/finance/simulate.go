package finance

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chsql"
)

// Refusal is one request the proposed limits would have refused.
type Refusal struct {
	Time      time.Time
	RequestID string
	// Limit is the first limit without headroom; Value the scope value it
	// applied to ("" for global).
	Limit budget.Limit
	Value string
	// SpentNano is what the limit's total held when the request came.
	SpentNano int64
	// SavedNano is the request's cost, not spent.
	SavedNano int64
}

// Simulation is the outcome of Simulate.
type Simulation struct {
	Events   int
	Refusals []Refusal
	// SpentNano is what the allowed requests cost; SavedNano what the
	// refused ones would have.
	SpentNano, SavedNano int64
	// SavedBy sums SavedNano per refusing limit and value, keyed
	// "scope value period".
	SavedBy map[string]int64
}

// Simulate replays the events of [since, until) from ClickHouse in time
// order against limits, as the gateway enforces them: a request is refused
// when any applicable limit's total for the request's period has no
// headroom left (spend >= amount), and then costs nothing; otherwise its
// cost is added to every total it belongs to. Totals start at zero at
// since (for month and day periods that began earlier, the spend before
// since is not known to the simulation: start since at a period start).
func Simulate(ctx context.Context, conn driver.Conn, limits []budget.Limit, since, until time.Time) (*Simulation, error) {
	rows, err := conn.Query(ctx, chsql.SimulateHistory.SQL,
		since.Unix(), until.Unix())
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	defer rows.Close()
	sim := &Simulation{SavedBy: map[string]int64{}}
	spent := map[budget.TotalID]int64{}
	var vals [budget.NumScopes]string
	for rows.Next() {
		var req string
		var ms uint64
		var cost int64
		if err := rows.Scan(&req, &ms, &vals[budget.ScopeDept], &vals[budget.ScopeTeam], &vals[budget.ScopeProject],
			&vals[budget.ScopeSubject], &vals[budget.ScopeKey], &cost); err != nil {
			return nil, fmt.Errorf("read history: %w", err)
		}
		sim.Events++
		vals = budget.ScopeValues(vals[budget.ScopeKey], vals[budget.ScopeSubject], vals[budget.ScopeDept],
			vals[budget.ScopeTeam], vals[budget.ScopeProject])
		ts := time.UnixMilli(int64(ms)).UTC()
		ids := make([]budget.TotalID, 0, len(limits))
		refused := false
		for _, l := range limits {
			v := ""
			if l.Scope != budget.ScopeGlobal {
				v = vals[l.Scope]
				if v == "" || !l.Matches(v) {
					continue
				}
			}
			id := budget.TotalID{Scope: l.Scope, Value: v, Period: l.Period, Start: start(l.Period, ts)}
			ids = append(ids, id)
			if !refused && spent[id] >= l.AmountNano {
				refused = true
				sim.Refusals = append(sim.Refusals, Refusal{Time: ts, RequestID: req, Limit: l, Value: v, SpentNano: spent[id], SavedNano: cost})
				sim.SavedNano += cost
				sim.SavedBy[fmt.Sprintf("%s %s %s", l.Scope, v, l.Period)] += cost
			}
		}
		if refused {
			continue
		}
		sim.SpentNano += cost
		for _, id := range ids {
			spent[id] += cost
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	sort.SliceStable(sim.Refusals, func(i, j int) bool { return sim.Refusals[i].Time.Before(sim.Refusals[j].Time) })
	return sim, nil
}

// start numbers the period containing t as budget.TotalID.Start does.
func start(p budget.Period, t time.Time) int32 {
	switch p {
	case budget.PeriodDay:
		return int32(t.Unix() / 86400)
	case budget.PeriodMonth:
		return int32(t.Year()*12 + int(t.Month()) - 1)
	}
	return 0
}
