package reconcile

import (
	"context"
	"fmt"
	"math"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tollgate/tollgate/pkg/chsql"
)

// readClickHouse counts the rows of usage_events in the window, each event
// id once (its cost taken from any of its copies, which are identical), and
// the rows before that deduplication.
func readClickHouse(ctx context.Context, conn driver.Conn, w window) (Source, error) {
	var args []any
	if !w.openLo {
		args = append(args, clampSec(floorDiv(w.lo, 1000)), uint64(max(w.lo, 0)))
	}
	if !w.openHi {
		args = append(args, clampSec(floorDiv(w.hi, 1000)), uint64(max(w.hi, 0)))
	}
	q := chsql.ReconcileCount(!w.openLo, !w.openHi)
	var unique, raw uint64
	var cost int64
	if err := conn.QueryRow(ctx, q.SQL, args...).Scan(&unique, &cost, &raw); err != nil {
		return Source{}, fmt.Errorf("count usage_events in clickhouse: %w", err)
	}
	return Source{Name: SourceClickHouse, Requests: int64(unique), CostNanoUSD: cost, Extra: map[string]int64{
		"raw_rows":   int64(raw),
		"duplicates": int64(raw - unique),
	}}, nil
}

// clampSec bounds a Unix second to what DateTime holds.
func clampSec(s int64) uint32 {
	return uint32(min(max(s, 0), math.MaxUint32))
}
