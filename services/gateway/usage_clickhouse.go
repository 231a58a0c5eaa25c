//go:build clickhouse

package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/finance"
	"github.com/tollgate/tollgate/pkg/usage"
)

// usageExplainer answers GET /admin/usage/{request_id}: from ClickHouse
// when TOLLGATE_CLICKHOUSE names a server (database TOLLGATE_CLICKHOUSE_DB,
// default tollgate; CLICKHOUSE_USER / CLICKHOUSE_PASSWORD), else by
// scanning the last 24 hours of the usage stream. The returned func closes
// the ClickHouse connection, if any. Built with -tags clickhouse only: the
// driver costs the gateway resident memory it otherwise does not need.
func usageExplainer(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*billing.Explainer, func()) {
	ex := &billing.Explainer{Stream: usage.StreamName, Window: billing.DefaultStreamWindow}
	if addr := os.Getenv("TOLLGATE_CLICKHOUSE"); addr != "" {
		st, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: os.Getenv("TOLLGATE_CLICKHOUSE_DB"),
			User: os.Getenv("CLICKHOUSE_USER"), Password: os.Getenv("CLICKHOUSE_PASSWORD")})
		if err == nil {
			ex.Store = finance.Store{Conn: st.Conn()}
			return ex, func() { _ = st.Close() }
		}
		log.Warn("usage lookups read the stream: clickhouse unavailable", "addr", addr, "err", err)
	}
	ex.JS = js
	return ex, func() {}
}
