package chstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chsql"
)

// Limit is one configured budget limit as stored in the table
// budget_limits (migration 0009): the limits the gateways enforce, for
// dashboards to compare spend with.
type Limit struct {
	// Scope is key, subject, team, dept, project or global.
	Scope string `ch:"scope"`
	// Value is the scope value, "*" for each value separately, "" for
	// global; team and project values name their department
	// ("research/ml").
	Value string `ch:"value"`
	// Period is day, month or total.
	Period string `ch:"period"`
	// AmountNano is the limit in nano-USD.
	AmountNano int64 `ch:"amount_nano_usd"`
}

// limitKey is a limit without its amount: the table's sorting key.
type limitKey struct{ scope, value, period string }

func (l Limit) key() limitKey { return limitKey{l.Scope, l.Value, l.Period} }

// WriteLimits makes limits the current set of budget_limits, as seen
// through the view budget_limits_current: it stores a row for every limit
// and a removed row for every current limit not in limits, all with one
// version larger than any stored (now in milliseconds since the epoch, or
// one more than the largest stored when the clock is behind). Several
// writers with the same config leave the same current set. Two different
// configs written at the same moment (a reload reaching two instances
// mid-change) may leave a mix of both, since each writer removes only the
// limits it read; the next write of either settles it. With nothing to
// write and nothing stored it writes nothing. It returns the version of the
// current set.
func (s *Store) WriteLimits(ctx context.Context, limits []Limit, now time.Time) (uint64, error) {
	current, latest, err := s.currentLimits(ctx)
	if err != nil {
		return 0, err
	}
	version := uint64(now.UnixMilli())
	if version <= latest {
		version = latest + 1
	}
	keep := make(map[limitKey]bool, len(limits))
	b, err := s.conn.PrepareBatch(ctx, chsql.InsertLimits.SQL)
	if err != nil {
		return 0, fmt.Errorf("prepare budget limits insert: %w", err)
	}
	defer b.Abort() //nolint:errcheck // a no-op after Send
	at := now.UTC().Truncate(time.Second)
	for _, l := range limits {
		keep[l.key()] = true
		if err := b.Append(l.Scope, l.Value, l.Period, l.AmountNano, uint8(0), version, at); err != nil {
			return 0, fmt.Errorf("append budget limit %s %q %s: %w", l.Scope, l.Value, l.Period, err)
		}
	}
	for _, l := range current {
		if keep[l.key()] {
			continue
		}
		if err := b.Append(l.Scope, l.Value, l.Period, l.AmountNano, uint8(1), version, at); err != nil {
			return 0, fmt.Errorf("append removed budget limit %s %q %s: %w", l.Scope, l.Value, l.Period, err)
		}
	}
	if b.Rows() == 0 {
		return latest, nil // nothing configured, nothing stored
	}
	if err := b.Send(); err != nil {
		return 0, fmt.Errorf("insert budget limits: %w", err)
	}
	return version, nil
}

// Limits returns the current set of budget limits (budget_limits_current),
// ordered by scope, value and period.
func (s *Store) Limits(ctx context.Context) ([]Limit, error) {
	ls, _, err := s.currentLimits(ctx)
	return ls, err
}

// currentLimits returns the current limits and the largest version stored
// (0 when none).
func (s *Store) currentLimits(ctx context.Context) ([]Limit, uint64, error) {
	var ls []Limit
	if err := s.conn.Select(ctx, &ls, chsql.CurrentLimits.SQL); err != nil {
		return nil, 0, fmt.Errorf("read budget limits: %w", err)
	}
	var latest uint64
	if err := s.conn.QueryRow(ctx, chsql.LimitsVersion.SQL).Scan(&latest); err != nil {
		return nil, 0, fmt.Errorf("read budget limits version: %w", err)
	}
	return ls, latest, nil
}

// BudgetLimits returns parsed limits (budget.ParseLimits) as rows of
// budget_limits.
func BudgetLimits(limits []budget.Limit) []Limit {
	rows := make([]Limit, len(limits))
	for i, l := range limits {
		rows[i] = Limit{Scope: l.Scope.String(), Value: l.Value, Period: l.Period.String(), AmountNano: l.AmountNano}
	}
	return rows
}

// DefaultLimitRetry is how long a LimitWriter waits to try a failed write
// again.
const DefaultLimitRetry = 10 * time.Second

// LimitWriter makes the budget limits it is handed the current set of
// budget_limits (WriteLimits), from its own loop (Run), so that whoever
// hands a set over (a start-up, a config reload) never waits on
// ClickHouse. Only the newest set counts: one replaced before Run took it
// is never written. A failed write is logged and tried again after Retry,
// or as soon as a newer set arrives. The analytics service and gateway
// -embed both write their limits through one.
type LimitWriter struct {
	// Retry is the wait before a failed write is tried again. Default
	// DefaultLimitRetry.
	Retry time.Duration
	// Logger receives each write and failure. Default slog.Default().
	Logger *slog.Logger
	// Now stamps each write (its version and updated_at). Default time.Now.
	Now func() time.Time

	sets chan []budget.Limit // capacity 1: the newest set Run has not taken
}

// NewLimitWriter returns a LimitWriter with nothing to write yet.
func NewLimitWriter(log *slog.Logger) *LimitWriter {
	return &LimitWriter{Retry: DefaultLimitRetry, Logger: log, Now: time.Now, sets: make(chan []budget.Limit, 1)}
}

// SetLimits hands limits over as the newest set to write, replacing one
// not yet taken. It never blocks. An empty set is written too: it removes
// every stored limit.
func (w *LimitWriter) SetLimits(limits []budget.Limit) {
	for {
		select {
		case w.sets <- limits:
			return
		default:
		}
		select {
		case <-w.sets: // replaced
		default:
		}
	}
}

// Run writes each set handed over to store until ctx ends, when it
// returns nil; a write in progress is cut by ctx.
func (w *LimitWriter) Run(ctx context.Context, store *Store) error {
	log, now, wait := w.Logger, w.Now, w.Retry
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	if wait <= 0 {
		wait = DefaultLimitRetry
	}
	var limits []budget.Limit
	var retry <-chan time.Time // non-nil while a failed write waits
	for {
		select {
		case <-ctx.Done():
			return nil
		case limits = <-w.sets:
		case <-retry:
		}
		version, err := store.WriteLimits(ctx, BudgetLimits(limits), now())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Error("budget limits not written; trying again", "in", wait, "err", err)
			retry = time.After(wait)
			continue
		}
		retry = nil
		log.Info("budget limits written", "limits", len(limits), "version", version)
	}
}
