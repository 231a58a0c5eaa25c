package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/profiling"
)

// run starts the program's parts in this order, each using those before
// it, and runs until ctx ends:
//
//  1. the logger and the profiler (when a Pyroscope server is configured);
//  2. ClickHouse: waits for the server, then applies the migrations;
//  3. the NATS connection;
//  4. the usage and audit loaders, the budget limits writer (again on
//     each value from reload) and the metrics listener.
//
// Shutdown is the reverse: on ctx's end the loaders finish the batch in
// hand and the metrics listener closes, then the NATS connection, then
// ClickHouse's, then the profiler sends what it holds.
func (s settings) run(ctx context.Context, reload <-chan os.Signal) error {
	cfg := s.cfg
	log := cfg.Log.NewLogger(os.Stderr)
	// The profiling section is shared with the gateway; its
	// application_name is the gateway's, so this one is fixed.
	stopProfiling, err := profiling.Start(profiling.Config{ServerAddress: cfg.Profiling.ServerAddress,
		ApplicationName: "tollgate.analytics", Tags: cfg.Profiling.Tags, Getenv: s.getenv}, log)
	if err != nil {
		return err
	}
	defer stopProfiling()

	store, err := chstore.OpenWait(ctx, s.store, log)
	if err != nil || store == nil {
		return err // nil: stopped while waiting for ClickHouse
	}
	defer store.Close()
	if s.migrateOnly {
		log.Info("analytics schema migrated", "clickhouse", s.store.Addr, "database", s.store.Database, "cluster", s.store.Cluster)
		return nil
	}

	nc, err := natsconn.Connect(cfg.NATS, "tollgate-analytics", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	lo := s.loader
	lo.Logger, lo.Registerer = log, reg
	limits := chstore.NewLimitWriter(log)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return chstore.RunLoaders(ctx, store, js, lo, limits) })
	g.Go(func() error { return s.writeLimits(ctx, reload, limits, log) })
	metrics.Serve(ctx, g, s.metrics, reg)
	log.Info("analytics loader started", "nats", nc.ConnectedUrlRedacted(), "clickhouse", s.store.Addr, "database", s.store.Database)
	err = g.Wait()
	log.Info("analytics loader stopped", "err", err)
	return err
}

// writeLimits hands the config's budget limits to w at start and again,
// re-reading the file, on each value from reload, until ctx ends.
func (s settings) writeLimits(ctx context.Context, reload <-chan os.Signal, w *chstore.LimitWriter, log *slog.Logger) error {
	if s.cfgPath != "" {
		setLimits(w, s.cfg, log)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reload:
			if s.cfgPath == "" {
				log.Warn("reload: no config file, budget limits not written")
				continue
			}
			c, err := config.LoadEnv(s.cfgPath, s.getenv)
			if err != nil {
				log.Error("reload: budget limits not written", "err", err)
				continue
			}
			setLimits(w, c, log)
		}
	}
}

// setLimits hands cfg's budget limits to w, to be written as the current
// set of budget_limits. A config whose limits do not parse or nest is
// logged and the limits stay as last written: the usage loaders go on
// without them.
func setLimits(w *chstore.LimitWriter, cfg *config.Config, log *slog.Logger) {
	limits, err := budget.ParseLimits(cfg.Budgets)
	if err == nil {
		err = budget.ValidateHierarchy(limits, cfg.BudgetOvercommit)
	}
	if err != nil {
		log.Error("budget limits not written", "err", err)
		return
	}
	w.SetLimits(limits)
}
