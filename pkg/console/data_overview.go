package console

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chsql"
)

// Overview is the overview page's data.
type Overview struct {
	Now time.Time
	// Depts are the departments in view with a total or a limit this
	// month, by name: today's and the month's live spend against the
	// tightest limit of each.
	Depts []DeptSpend
	// Drift compares, per scope, the spend of the usage events stored in
	// ClickHouse with the spend the totals have applied.
	Drift []Drift
	// TopModels and TopTeams rank the month to date by spend; Daily is the
	// spend per day of the last SeriesDays days (days without spend are
	// absent).
	TopModels []Ranked
	TopTeams  []Ranked
	Daily     []DayPoint
	// History is why the ClickHouse figures (Drift, TopModels, TopTeams,
	// Daily) are missing, nil when they are there.
	History error
}

// SeriesDays is how many days the overview's chart spans, today included.
const SeriesDays = 30

// DeptSpend is one department's current day and month.
type DeptSpend struct {
	Dept         string
	Today, Month PeriodSpend
}

// Ranked is one row of a top list: a served model or a team
// ("dept/team"), month to date.
type Ranked struct {
	Name     string
	Requests uint64
	CostNano int64
}

// DayPoint is one day's spend.
type DayPoint struct {
	Day      string // YYYY-MM-DD
	CostNano int64
}

// Drift is one scope's spend as counted by the gateways (the usage events
// stored, all time) against the spend applied to its all-time totals:
// the figure tollctl reconcile --by-scope shows, with ClickHouse in place
// of a replay of the stream. UnappliedNano = CountedNano - AppliedNano;
// above zero it is the budget consumer's lag (or events the analytics
// loader stored that the totals miss), below zero events the loader has
// not stored yet.
type Drift struct {
	Scope                    string
	CountedNano, AppliedNano int64
	UnappliedNano            int64
}

// Overview returns the overview for v.
func (d *Data) Overview(ctx context.Context, v View) (*Overview, error) {
	now := d.now()
	ix := indexLimits(d.Totals.Report())
	o := &Overview{Now: now}
	depts := map[string]bool{}
	for _, p := range []budget.Period{budget.PeriodDay, budget.PeriodMonth} {
		for _, dept := range d.Totals.Values(budget.ScopeDept, p, v.Sees) {
			depts[dept] = true
		}
	}
	for k := range ix {
		if k[0] == budget.ScopeDept.String() && v.Sees(k[1]) {
			depts[k[1]] = true
		}
	}
	for _, dept := range sortedKeys(depts) {
		o.Depts = append(o.Depts, DeptSpend{Dept: dept,
			Today: d.periodSpend(ix, budget.ScopeDept, dept, budget.PeriodDay, now),
			Month: d.periodSpend(ix, budget.ScopeDept, dept, budget.PeriodMonth, now)})
	}
	o.History = d.overviewHistory(ctx, v, now, o)
	return o, nil
}

// overviewHistory fills the ClickHouse figures of o, or says why not. Its
// four reads run at once: the page waits for the slowest, not the sum.
func (d *Data) overviewHistory(ctx context.Context, v View, now time.Time, o *Overview) error {
	conn, err := d.conn()
	if err != nil {
		return err
	}
	first, last := monthRange(now)
	dept := v.bind()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		sql, args := chsql.ConsoleTopModels.SQL, []any{first, last}
		if !v.All() {
			sql, args = chsql.ConsoleTopModelsDept.SQL, append(args, dept)
		}
		err := queryRows(gctx, conn, sql, args, func(rows chsql.Rows) error {
			var r Ranked
			err := rows.Scan(&r.Name, &r.Requests, &r.CostNano)
			o.TopModels = append(o.TopModels, r)
			return err
		})
		return historyErr("top models", err)
	})
	g.Go(func() error {
		prefix := ""
		if !v.All() {
			prefix = teamPrefix(dept)
		}
		err := queryRows(gctx, conn, chsql.ConsoleTopTeams.SQL, []any{first, last, prefix, prefix}, func(rows chsql.Rows) error {
			var r Ranked
			err := rows.Scan(&r.Name, &r.Requests, &r.CostNano)
			o.TopTeams = append(o.TopTeams, r)
			return err
		})
		return historyErr("top teams", err)
	})
	g.Go(func() error {
		from := now.AddDate(0, 0, -(SeriesDays - 1)).Format(time.DateOnly)
		err := queryRows(gctx, conn, chsql.ConsoleSpendDaily.SQL, []any{from, last, dept, dept}, func(rows chsql.Rows) error {
			var p DayPoint
			err := rows.Scan(&p.Day, &p.CostNano)
			o.Daily = append(o.Daily, p)
			return err
		})
		return historyErr("daily spend", err)
	})
	g.Go(func() error {
		drift, err := d.drift(gctx, conn, v)
		o.Drift = drift
		return err
	})
	return g.Wait()
}

// drift compares the stored events with the applied totals: the global
// scope and every department's together for a View of every department,
// the department's own total otherwise. (Team, project, subject and key
// totals are the same events again; tollctl reconcile --by-scope shows
// them.)
func (d *Data) drift(ctx context.Context, conn chsql.Querier, v View) ([]Drift, error) {
	if !v.All() {
		var counted int64
		if err := conn.QueryRow(ctx, chsql.ConsoleCountedDept.SQL, v.bind()).Scan(&counted); err != nil {
			return nil, historyErr("counted spend", err)
		}
		applied, _, _ := d.Totals.Spend(budget.TotalID{Scope: budget.ScopeDept, Value: v.Dept(), Period: budget.PeriodTotal})
		return []Drift{{Scope: "dept", CountedNano: counted, AppliedNano: applied, UnappliedNano: counted - applied}}, nil
	}
	var global, depts int64
	if err := conn.QueryRow(ctx, chsql.ConsoleCounted.SQL).Scan(&global, &depts); err != nil {
		return nil, historyErr("counted spend", err)
	}
	out := make([]Drift, 0, 2)
	for _, sc := range []struct {
		scope   budget.Scope
		counted int64
	}{{budget.ScopeGlobal, global}, {budget.ScopeDept, depts}} {
		a := d.Totals.Applied(sc.scope)
		out = append(out, Drift{Scope: sc.scope.String(), CountedNano: sc.counted, AppliedNano: a, UnappliedNano: sc.counted - a})
	}
	return out, nil
}
