package chstore

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tollgate/tollgate/pkg/chsql"
)

// Querier adapts a clickhouse-go connection to chsql.Querier (nil for
// nil): a chsql.Set bind becomes a clickhouse.GroupSet.
func Querier(conn driver.Conn) chsql.Querier {
	if conn == nil {
		return nil
	}
	return querier{conn}
}

type querier struct{ conn driver.Conn }

func (q querier) Query(ctx context.Context, sql string, args ...any) (chsql.Rows, error) {
	rows, err := q.conn.Query(ctx, sql, binds(args)...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (q querier) QueryRow(ctx context.Context, sql string, args ...any) chsql.Row {
	return q.conn.QueryRow(ctx, sql, binds(args)...)
}

// binds turns each chsql.Set of args into a clickhouse.GroupSet.
func binds(args []any) []any {
	out := args
	for i, a := range args {
		if s, ok := a.(chsql.Set); ok {
			if &out[0] == &args[0] {
				out = append([]any(nil), args...)
			}
			out[i] = clickhouse.GroupSet{Value: []any(s)}
		}
	}
	return out
}
