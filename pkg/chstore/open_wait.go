package chstore

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// OpenWait connects to ClickHouse and applies the schema (Migrate),
// retrying while ClickHouse is down with a backoff from 0.5s doubling to
// 30s, each failure logged as a warning. It returns a nil Store and a nil
// error when ctx ends first, and an error at once for invalid options.
// The analytics service and the gateway's all-in-one mode start with it.
func OpenWait(ctx context.Context, o Options, log *slog.Logger) (*Store, error) {
	wait := 500 * time.Millisecond
	for {
		store, err := Open(ctx, o)
		if err == nil {
			if err = store.Migrate(ctx); err == nil {
				return store, nil
			}
			store.Close()
		}
		if errors.Is(err, ErrInvalidOptions) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		log.Warn("clickhouse not ready; retrying", "addr", o.Addr, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}
