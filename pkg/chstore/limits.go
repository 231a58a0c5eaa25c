package chstore

import (
	"context"
	"fmt"
	"time"
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
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO budget_limits (scope, value, period, amount_nano_usd, removed, version, updated_at)")
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
	if err := s.conn.Select(ctx, &ls, "SELECT scope, value, period, amount_nano_usd FROM budget_limits_current ORDER BY scope, value, period"); err != nil {
		return nil, 0, fmt.Errorf("read budget limits: %w", err)
	}
	var latest uint64
	if err := s.conn.QueryRow(ctx, "SELECT max(version) FROM budget_limits").Scan(&latest); err != nil {
		return nil, 0, fmt.Errorf("read budget limits version: %w", err)
	}
	return ls, latest, nil
}
