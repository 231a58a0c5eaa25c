package console

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/gateway"
)

// The data layer of the read pages: plain values, no HTML. Live figures
// (spend, reservations, limits, forecasts) come from the spend totals the
// gateway watches (its budget.Tracker), which are what it admits requests
// by and what tollctl budget show reads from the same KV bucket; history
// (top models and teams, spend over time, recent requests) comes from the
// ClickHouse rollups, and from usage_events only within a window that
// bounds the rows read. Which departments a user sees is decided by a View
// and applied in every query here, not by the templates.

// ErrNoClickHouse is returned for history when the gateway reads no
// ClickHouse: set TOLLGATE_CLICKHOUSE on a gateway built with -tags
// clickhouse.
var ErrNoClickHouse = errors.New("ClickHouse is not configured: set TOLLGATE_CLICKHOUSE on a gateway built with -tags clickhouse")

// ErrNotAllowed is returned when the View does not include what was asked
// for (another department's scope, request or key).
var ErrNotAllowed = errors.New("not allowed")

// ErrBadInput wraps the reason a client's parameter was refused (a
// malformed scope, cursor, time or status).
var ErrBadInput = errors.New("bad input")

// totals is what the pages read of the gateway's spend totals
// (*budget.Tracker).
type totals interface {
	Report() []budget.LimitStatus
	Spend(id budget.TotalID) (spendNano, reservedNano int64, asOfSeq uint64)
	Values(scope budget.Scope, period budget.Period, keep func(v string) bool) []string
	Applied(scope budget.Scope) int64
}

// explainer finds the charge of a request (*billing.Explainer).
type explainer interface {
	Explain(ctx context.Context, requestID string) (*billing.Charge, error)
	ExplainAt(ctx context.Context, requestID, dept string, at time.Time) (*billing.Charge, error)
}

// Data answers the read pages. Its fields are set once, before use.
type Data struct {
	// Totals are the gateway's spend totals and limits.
	Totals totals
	// CH is the analytics database; nil when not configured (the pages
	// then show the live figures and say why history is missing).
	CH chsql.Querier
	// Explainer finds a request's charge (*billing.Explainer).
	Explainer explainer
	// Routes returns the gateway's routes and target states
	// ((*gateway.Gateway).Routes).
	Routes func() gateway.Routes
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (d *Data) now() time.Time {
	if d.Now != nil {
		return d.Now().UTC()
	}
	return time.Now().UTC()
}

func (d *Data) conn() (chsql.Querier, error) {
	if d.CH == nil {
		return nil, ErrNoClickHouse
	}
	return d.CH, nil
}

// View is the set of departments a user may see: every one (roles admin
// and finance) or their own. The zero View sees nothing.
type View struct {
	all  bool
	dept string
}

// AllDepts is the View of every department.
func AllDepts() View { return View{all: true} }

// OneDept is the View of department dept alone; an empty dept sees
// nothing (a user without a department claim).
func OneDept(dept string) View { return View{dept: dept} }

// All reports whether v sees every department.
func (v View) All() bool { return v.all }

// Dept is the one department v sees ("" for AllDepts or nothing).
func (v View) Dept() string { return v.dept }

// Sees reports whether v includes department dept.
func (v View) Sees(dept string) bool { return v.all || v.dept != "" && v.dept == dept }

// bind is the department bound for a query: ” (every one) or v's. A View
// that sees nothing binds a value no department has.
func (v View) bind() string {
	if v.all {
		return ""
	}
	if v.dept == "" {
		return "\x00none"
	}
	return v.dept
}

// seesValue reports whether v includes a total of scope with value: a
// department, or a team or project qualified by one. Subjects, keys and
// the global total are every department's, so a one-department View sees
// them only through membership (Budgets asks ClickHouse).
func (v View) seesValue(sc budget.Scope, value string) bool {
	if v.all {
		return true
	}
	switch sc {
	case budget.ScopeDept:
		return v.Sees(value)
	case budget.ScopeTeam, budget.ScopeProject:
		d, _, ok := budget.SplitQualified(value)
		return ok && v.Sees(d)
	}
	return false
}

// LimitState is one limit applied to one scope value in its current
// period: the live spend and what is left. Amounts are nano-USD.
type LimitState struct {
	Scope, Value, Period, PeriodStart string
	LimitNano                         int64
	SpentNano, ReservedNano           int64
	// HeadroomNano is LimitNano - SpentNano - ReservedNano (below zero
	// when over).
	HeadroomNano int64
	// Utilization is (spent + reserved) / limit.
	Utilization float64
	Forecast    budget.Forecast
}

func limitState(s budget.LimitStatus) LimitState {
	return LimitState{Scope: s.Scope, Value: s.Value, Period: s.Period, PeriodStart: s.PeriodStart, LimitNano: s.LimitNano,
		SpentNano: s.SpendNano, ReservedNano: s.Reserved, HeadroomNano: s.LimitNano - s.SpendNano - s.Reserved,
		Utilization: s.Utilization, Forecast: s.Forecast}
}

// PeriodSpend is a scope value's live spend in one current period, with
// the tightest limit on it (nil when none applies).
type PeriodSpend struct {
	Period, PeriodStart     string
	SpentNano, ReservedNano int64
	Limit                   *LimitState
}

// limitIndex finds the limits of the report by scope, value and period.
type limitIndex map[[3]string][]LimitState

func indexLimits(report []budget.LimitStatus) limitIndex {
	ix := limitIndex{}
	for _, s := range report {
		k := [3]string{s.Scope, s.Value, s.Period}
		ix[k] = append(ix[k], limitState(s))
	}
	return ix
}

// tightest returns the limit with the least headroom, or nil.
func (ix limitIndex) tightest(sc budget.Scope, value string, p budget.Period) *LimitState {
	var best *LimitState
	for i, l := range ix[[3]string{sc.String(), value, p.String()}] {
		if best == nil || l.HeadroomNano < best.HeadroomNano {
			best = &ix[[3]string{sc.String(), value, p.String()}][i]
		}
	}
	return best
}

// periodSpend reads one scope value's current period from the totals.
func (d *Data) periodSpend(ix limitIndex, sc budget.Scope, value string, p budget.Period, now time.Time) PeriodSpend {
	id := budget.TotalID{Scope: sc, Value: value, Period: p, Start: budget.PeriodStarts(now.UnixNano())[p]}
	spent, reserved, _ := d.Totals.Spend(id)
	return PeriodSpend{Period: p.String(), PeriodStart: id.PeriodStart(), SpentNano: spent, ReservedNano: reserved,
		Limit: ix.tightest(sc, value, p)}
}

// monthRange returns the first and last day of now's month to date, as
// ClickHouse Date binds.
func monthRange(now time.Time) (first, last string) {
	return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).Format(time.DateOnly), now.Format(time.DateOnly)
}

// queryRows runs a catalogue statement and scans each row with scan.
func queryRows(ctx context.Context, conn chsql.Querier, sql string, args []any, scan func(chsql.Rows) error) error {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// sortedKeys returns m's keys sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// historyErr wraps a ClickHouse failure for a page's error state; nil
// stays nil.
func historyErr(what string, err error) error {
	if err == nil || errors.Is(err, ErrNoClickHouse) {
		return err
	}
	return fmt.Errorf("read %s from ClickHouse: %w", what, err)
}
