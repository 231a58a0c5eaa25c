//go:build clickhouse

package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

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

// startAnalytics runs, in -embed mode, what the analytics service runs:
// the usage and audit loaders into ClickHouse, when TOLLGATE_CLICKHOUSE
// names a server (database TOLLGATE_CLICKHOUSE_DB, default tollgate;
// CLICKHOUSE_USER / CLICKHOUSE_PASSWORD). They run in g until ctx ends;
// while ClickHouse is down the gateway serves and events wait in the
// stream.
func startAnalytics(ctx context.Context, g *errgroup.Group, js jetstream.JetStream, replicas int, reg prometheus.Registerer, getenv func(string) string, log *slog.Logger) {
	addr := getenv("TOLLGATE_CLICKHOUSE")
	if addr == "" {
		return
	}
	o := chstore.Options{Addr: addr, Database: getenv("TOLLGATE_CLICKHOUSE_DB"),
		User: getenv("CLICKHOUSE_USER"), Password: getenv("CLICKHOUSE_PASSWORD")}
	g.Go(func() error {
		store, err := chstore.OpenWait(ctx, o, log)
		if err != nil || store == nil {
			return err // nil: stopped while waiting for ClickHouse
		}
		defer store.Close()
		loader, err := chstore.NewLoader(store, js, chstore.LoaderOptions{LeaseReplicas: replicas, Logger: log, Registerer: reg})
		if err != nil {
			return err
		}
		log.Info("analytics loader started", "clickhouse", addr)
		audit := chstore.NewAuditLoader(store, js, 0, log)
		ag, actx := errgroup.WithContext(ctx)
		ag.Go(func() error { return loader.Run(actx) })
		ag.Go(func() error { return audit.Run(actx) })
		return ag.Wait()
	})
}
