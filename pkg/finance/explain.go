package finance

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// ErrNotFound is billing.ErrNotFound: Explain wraps it when no event has
// the request id.
var ErrNotFound = billing.ErrNotFound

// Explain looks up the usage event of requestID in ClickHouse. tables maps pricing
// versions to their tables (the embedded table is always known).
func Explain(ctx context.Context, conn driver.Conn, requestID string, tables ...*pricing.Table) (*billing.Charge, error) {
	return explain(ctx, conn, requestID, tables, chsql.Explain.SQL, requestID)
}

// ExplainAt is Explain for a request known to be of department dept at
// second at: the lookup reads a few rows by the table's sorting key
// instead of every request id.
func ExplainAt(ctx context.Context, conn driver.Conn, requestID, dept string, at time.Time, tables ...*pricing.Table) (*billing.Charge, error) {
	return explain(ctx, conn, requestID, tables, chsql.ExplainAt.SQL, dept, at.Unix(), requestID)
}

func explain(ctx context.Context, conn driver.Conn, requestID string, tables []*pricing.Table, sql string, args ...any) (*billing.Charge, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("look up request %s: %w", requestID, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("look up request %s: %w", requestID, err)
		}
		return nil, fmt.Errorf("%w %s", ErrNotFound, requestID)
	}
	c := &billing.Charge{}
	var est, recovered uint8
	var scope, value, period, start []string
	var fromToken []uint8
	var limit, spent, reserved, headroom []int64
	if err := rows.Scan(&c.EventID, &c.RequestID, &c.Time, &c.Issuer, &c.Subject, &c.KeyID, &c.Dept, &c.Team, &c.Project,
		&c.RequestedModel, &c.ServedModel, &c.Provider, &c.Deployment, &c.Route, &c.Attempts, &c.Fallbacks, &c.Endpoint,
		&c.StatusCode, &c.ErrorType, &c.PromptTokens, &c.CompletionTokens, &c.CachedTokens, &c.CacheWriteTokens, &c.ReasoningTokens, &est,
		&c.CostNano, &c.PricingVersion, &c.ServiceTier, &recovered, &scope, &value, &period, &start, &fromToken,
		&limit, &spent, &reserved, &headroom); err != nil {
		return nil, fmt.Errorf("read request %s: %w", requestID, err)
	}
	c.Estimated, c.Recovered = est == 1, recovered == 1
	for i := range scope {
		if i >= len(value) || i >= len(period) || i >= len(start) || i >= len(fromToken) ||
			i >= len(limit) || i >= len(spent) || i >= len(reserved) || i >= len(headroom) {
			return nil, fmt.Errorf("read request %s: budget arrays of different lengths", requestID)
		}
		c.Budgets = append(c.Budgets, billing.BudgetCheck{Scope: scope[i], Value: value[i], Period: period[i], PeriodStart: start[i],
			FromToken: fromToken[i] == 1, LimitNano: limit[i], SpentNano: spent[i], ReservedNano: reserved[i], HeadroomNano: headroom[i]})
	}
	c.BreakDown(tables...)
	return c, nil
}

// Store answers billing.Explainer's lookups from ClickHouse.
type Store struct {
	Conn driver.Conn
}

// Charge is Explain on s.Conn.
func (s Store) Charge(ctx context.Context, requestID string, tables ...*pricing.Table) (*billing.Charge, error) {
	return Explain(ctx, s.Conn, requestID, tables...)
}

// ChargeAt is ExplainAt on s.Conn.
func (s Store) ChargeAt(ctx context.Context, requestID, dept string, at time.Time, tables ...*pricing.Table) (*billing.Charge, error) {
	return ExplainAt(ctx, s.Conn, requestID, dept, at, tables...)
}
