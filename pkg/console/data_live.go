package console

import (
	"github.com/tollgate/tollgate/pkg/budget"
)

// LiveTotal is one current total as GET /ui/events sends it (event
// totals): a department's day or month, or the global ones for a View of
// every department. Amounts are nano-USD.
type LiveTotal struct {
	// Scope is "dept:eng" or "global".
	Scope       string `json:"scope"`
	Period      string `json:"period"`
	PeriodStart string `json:"period_start"`
	SpentNano   int64  `json:"spent_nano"`
	Reserved    int64  `json:"reserved_nano"`
	AsOfSeq     uint64 `json:"as_of_seq"`
}

// Live returns the current day and month totals v sees, from the totals
// the gateway watches (no ClickHouse): what the overview's figures update
// from.
func (d *Data) Live(v View) []LiveTotal {
	now := d.now()
	starts := budget.PeriodStarts(now.UnixNano())
	var out []LiveTotal
	add := func(sc budget.Scope, value string, p budget.Period) {
		id := budget.TotalID{Scope: sc, Value: value, Period: p, Start: starts[p]}
		spent, res, seq := d.Totals.Spend(id)
		name := "global"
		if sc != budget.ScopeGlobal {
			name = sc.String() + ":" + value
		}
		out = append(out, LiveTotal{Scope: name, Period: p.String(), PeriodStart: id.PeriodStart(), SpentNano: spent, Reserved: res, AsOfSeq: seq})
	}
	for _, p := range []budget.Period{budget.PeriodDay, budget.PeriodMonth} {
		if v.All() {
			add(budget.ScopeGlobal, "", p)
		}
		for _, dept := range d.Totals.Values(budget.ScopeDept, p, v.Sees) {
			add(budget.ScopeDept, dept, p)
		}
	}
	return out
}
