package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chsql"
)

// Node names one scope value of the budgets drill-down: department ->
// team -> project -> subject -> key. Team and project values are
// qualified by their department ("eng/ml"), as budgets spell them.
type Node struct {
	Scope budget.Scope
	Value string
}

// String is the node as the page's scope parameter writes it:
// "dept:eng", "team:eng/ml"; "" for the top (every department).
func (n Node) String() string {
	if n.Scope == budget.ScopeGlobal {
		return ""
	}
	return n.Scope.String() + ":" + n.Value
}

// maxScopeParam bounds the scope parameter's length.
const maxScopeParam = 512

// ParseNode reads a scope parameter ("" or "global" for the top). It
// refuses an unknown scope, an empty value, control characters and a team
// or project not qualified by a department, wrapping ErrBadInput.
func ParseNode(s string) (Node, error) {
	if s == "" || s == "global" {
		return Node{}, nil
	}
	if len(s) > maxScopeParam {
		return Node{}, fmt.Errorf("%w: scope longer than %d bytes", ErrBadInput, maxScopeParam)
	}
	name, value, ok := strings.Cut(s, ":")
	sc, err := budget.ParseScope(name)
	switch {
	case !ok || err != nil || sc == budget.ScopeGlobal:
		return Node{}, fmt.Errorf("%w: scope %q is not dept:, team:, project:, subject: or key: and a value", ErrBadInput, s)
	case value == "" || strings.ContainsFunc(value, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return Node{}, fmt.Errorf("%w: scope %q has an empty value or a control character", ErrBadInput, s)
	}
	if sc == budget.ScopeTeam || sc == budget.ScopeProject {
		if _, _, ok := budget.SplitQualified(value); !ok {
			return Node{}, fmt.Errorf("%w: a %s is named with its department: dept/name", ErrBadInput, sc)
		}
	}
	return Node{Scope: sc, Value: value}, nil
}

// Budgets is the budgets page's data for one node.
type Budgets struct {
	Now  time.Time
	Node Node
	// Up is the node above in the drill-down (the top for a department),
	// when known: a subject's project is not, so its Up is the top.
	Up Node
	// Spend is the node's live spend by period (day, month, total); empty
	// at the top.
	Spend []PeriodSpend
	// Limits are the limits on the node (at the top: the global and
	// department limits in view; the others show on their nodes) with
	// their live spend, reservations, headroom and forecast.
	Limits []LimitState
	// Children are the next level down with their live month and day
	// spend: departments, teams, projects (month to date), subjects (month
	// to date), keys.
	Children []Child
	// ChildrenErr is why Children is missing (they come from ClickHouse
	// below the team), nil otherwise.
	ChildrenErr error
}

// Child is one value of the level below a node.
type Child struct {
	Node               Node
	DayNano, MonthNano int64
	ReservedNano       int64
}

// Budgets returns the budgets page of node for v, or ErrNotAllowed when
// v does not include it.
func (d *Data) Budgets(ctx context.Context, v View, n Node) (*Budgets, error) {
	now := d.now()
	if err := d.checkNode(ctx, v, n); err != nil {
		return nil, err
	}
	b := &Budgets{Now: now, Node: n}
	report := d.Totals.Report()
	ix := indexLimits(report)
	if n.Scope == budget.ScopeGlobal {
		for _, s := range report {
			sc, _ := budget.ParseScope(s.Scope)
			if (sc == budget.ScopeGlobal || sc == budget.ScopeDept) && v.seesValue(sc, s.Value) {
				b.Limits = append(b.Limits, limitState(s))
			}
		}
	} else {
		for _, p := range []budget.Period{budget.PeriodDay, budget.PeriodMonth, budget.PeriodTotal} {
			b.Spend = append(b.Spend, d.periodSpend(ix, n.Scope, n.Value, p, now))
			for _, l := range ix[[3]string{n.Scope.String(), n.Value, p.String()}] {
				b.Limits = append(b.Limits, l)
			}
		}
	}
	b.Up = d.up(n)
	values, err := d.children(ctx, v, n, now)
	if err != nil {
		b.ChildrenErr = err
	}
	starts := budget.PeriodStarts(now.UnixNano())
	for _, c := range values {
		day, _, _ := d.Totals.Spend(budget.TotalID{Scope: c.Scope, Value: c.Value, Period: budget.PeriodDay, Start: starts[budget.PeriodDay]})
		month, res, _ := d.Totals.Spend(budget.TotalID{Scope: c.Scope, Value: c.Value, Period: budget.PeriodMonth, Start: starts[budget.PeriodMonth]})
		b.Children = append(b.Children, Child{Node: c, DayNano: day, MonthNano: month, ReservedNano: res})
	}
	return b, nil
}

// up is the node above n when its value tells it.
func (d *Data) up(n Node) Node {
	switch n.Scope {
	case budget.ScopeTeam, budget.ScopeProject:
		dept, _, _ := budget.SplitQualified(n.Value)
		return Node{Scope: budget.ScopeDept, Value: dept}
	}
	return Node{}
}

// checkNode refuses a node outside v. A subject or key belongs to the
// departments it has spent in (ClickHouse); without ClickHouse a
// one-department View cannot tell, and is refused.
func (d *Data) checkNode(ctx context.Context, v View, n Node) error {
	if v.All() {
		return nil
	}
	switch n.Scope {
	case budget.ScopeGlobal:
		return nil // the top lists what v sees
	case budget.ScopeDept, budget.ScopeTeam, budget.ScopeProject:
		if v.seesValue(n.Scope, n.Value) {
			return nil
		}
		return ErrNotAllowed
	}
	conn, err := d.conn()
	if err != nil {
		return ErrNotAllowed
	}
	var found uint64
	if n.Scope == budget.ScopeKey {
		err = conn.QueryRow(ctx, chsql.ConsoleKeyInDept.SQL, v.bind(), n.Value).Scan(&found)
	} else {
		err = queryRows(ctx, conn, chsql.ConsoleSubjectKeys.SQL, []any{"1970-01-01", v.bind(), v.bind(), n.Value},
			func(chsql.Rows) error { found++; return nil })
	}
	if err != nil {
		return historyErr("membership", err)
	}
	if found == 0 {
		return ErrNotAllowed
	}
	return nil
}

// children lists the values below n that v sees: departments and teams
// from the live totals of this month, projects, subjects and keys from
// ClickHouse (month to date), which knows which team or project an event
// had.
func (d *Data) children(ctx context.Context, v View, n Node, now time.Time) ([]Node, error) {
	var out []Node
	add := func(sc budget.Scope, values []string) {
		for _, val := range values {
			out = append(out, Node{Scope: sc, Value: val})
		}
	}
	switch n.Scope {
	case budget.ScopeGlobal:
		add(budget.ScopeDept, d.Totals.Values(budget.ScopeDept, budget.PeriodMonth, v.Sees))
		return out, nil
	case budget.ScopeDept:
		prefix := teamPrefix(n.Value)
		add(budget.ScopeTeam, d.Totals.Values(budget.ScopeTeam, budget.PeriodMonth, func(val string) bool { return strings.HasPrefix(val, prefix) }))
		return out, nil
	case budget.ScopeKey:
		return nil, nil
	}
	conn, err := d.conn()
	if err != nil {
		return nil, err
	}
	first, _ := monthRange(now)
	monthStart, _ := time.Parse(time.DateOnly, first)
	from, to := monthStart.Unix(), now.Unix()+1
	collect := func(sc budget.Scope, qualify string, sql string, args ...any) error {
		return queryRows(ctx, conn, sql, args, func(rows chsql.Rows) error {
			var val string
			var cost int64
			if err := rows.Scan(&val, &cost); err != nil {
				return err
			}
			if qualify != "" {
				val = budget.Qualify(qualify, val)
			}
			out = append(out, Node{Scope: sc, Value: val})
			return nil
		})
	}
	switch n.Scope {
	case budget.ScopeTeam:
		dept, team, _ := budget.SplitQualified(n.Value)
		err = collect(budget.ScopeProject, dept, chsql.ConsoleTeamProjects.SQL, dept, team, from, to)
	case budget.ScopeProject:
		dept, project, _ := budget.SplitQualified(n.Value)
		err = collect(budget.ScopeSubject, "", chsql.ConsoleProjectSubjects.SQL, dept, project, from, to)
	case budget.ScopeSubject:
		err = collect(budget.ScopeKey, "", chsql.ConsoleSubjectKeys.SQL, first, v.bind(), v.bind(), n.Value)
	}
	if err != nil {
		return nil, historyErr("drill-down", err)
	}
	return out, nil
}

// teamPrefix is how the qualified team and project values of department
// dept begin: "eng/" (budget.Qualify).
func teamPrefix(dept string) string {
	p := budget.Qualify(dept, "x")
	return p[:len(p)-1]
}
