//go:build clickhouse

package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chsql"
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
func usageExplainer(ctx context.Context, js jetstream.JetStream, getenv func(string) string, log *slog.Logger) (*billing.Explainer, func()) {
	ex := &billing.Explainer{Stream: usage.StreamName, Window: billing.DefaultStreamWindow}
	if addr := getenv("TOLLGATE_CLICKHOUSE"); addr != "" {
		st, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: getenv("TOLLGATE_CLICKHOUSE_DB"),
			User: getenv("CLICKHOUSE_USER"), Password: getenv("CLICKHOUSE_PASSWORD")})
		if err == nil {
			ex.Store = finance.Store{Conn: st.Conn()}
			return ex, func() { _ = st.Close() }
		}
		log.Warn("usage lookups read the stream: clickhouse unavailable", "addr", addr, "err", err)
	}
	ex.JS = js
	return ex, func() {}
}

// startAnalytics runs what the analytics service runs when
// TOLLGATE_CLICKHOUSE names a server (database TOLLGATE_CLICKHOUSE_DB,
// default tollgate; CLICKHOUSE_USER / CLICKHOUSE_PASSWORD): the usage and
// audit loaders load ClickHouse and the enforced limits are written to
// budget_limits, at start and after each reload. While ClickHouse is down
// the gateway serves, events wait in the stream and the newest limits in
// memory. It returns where the limits of every reload go.
func startAnalytics(e embedded) limitSetter {
	ctx, g, js, getenv, log := e.ctx, e.g, e.js, e.getenv, e.log
	replicas, limits, tracker, reg := e.replicas, e.limits, e.tracker, e.reg
	addr := getenv("TOLLGATE_CLICKHOUSE")
	if addr == "" {
		return tracker
	}
	o := chstore.Options{Addr: addr, Database: getenv("TOLLGATE_CLICKHOUSE_DB"),
		User: getenv("CLICKHOUSE_USER"), Password: getenv("CLICKHOUSE_PASSWORD")}
	table := chstore.NewLimitWriter(log)
	table.SetLimits(limits)
	g.Go(func() error {
		store, err := chstore.OpenWait(ctx, o, log)
		if err != nil || store == nil {
			return err // nil: stopped while waiting for ClickHouse
		}
		defer store.Close()
		log.Info("analytics loader started", "clickhouse", addr)
		return chstore.RunLoaders(ctx, store, js, chstore.LoaderOptions{Replicas: replicas, Logger: log, Registerer: reg}, table)
	})
	return bothLimits{tracker, table}
}

// bothLimits hands each set of limits to the budget tracker and to the
// budget_limits writer.
type bothLimits struct {
	tracker limitSetter
	table   *chstore.LimitWriter
}

// SetLimits applies limits to the tracker, then queues them for the table.
func (b bothLimits) SetLimits(limits []budget.Limit) {
	b.tracker.SetLimits(limits)
	b.table.SetLimits(limits)
}

// historyConn is the ClickHouse connection the usage explainer reads, for
// the console's history pages; nil when it reads the stream.
func historyConn(ex *billing.Explainer) chsql.Querier {
	if s, ok := ex.Store.(finance.Store); ok {
		return chstore.Querier(s.Conn)
	}
	return nil
}
