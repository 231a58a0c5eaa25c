// Command analytics loads usage events from the JetStream stream
// TOLLGATE_USAGE, and audit events from TOLLGATE_AUDIT (table
// audit_events, durable analytics-audit), into ClickHouse (package
// pkg/chstore): it applies the
// schema migrations, then batch-inserts events until SIGTERM or interrupt,
// when it finishes the batch in hand and exits.
//
//	analytics [-config FILE] [-nats URL] [-clickhouse HOST:PORT] [-database NAME]
//	          [-batch-size N] [-batch-interval D] [-metrics ADDR]
//
// It reads the nats, log, profiling and budgets sections of the shared config file
// ($TOLLGATE_CONFIG; none by default); with a Pyroscope server configured
// (or $PYROSCOPE_SERVER_ADDRESS) it sends continuous profiles as
// application tollgate.analytics. The ClickHouse address defaults to
// $TOLLGATE_CLICKHOUSE, else 127.0.0.1:9000 (native protocol); credentials
// come from $CLICKHOUSE_USER and $CLICKHOUSE_PASSWORD. Several instances
// may run: one loads, the others stand by.
//
// With a config file it also writes the config's budget limits (the limits
// the gateways enforce) to the table budget_limits, at start and again
// each time it receives SIGHUP, re-reading the file; the dashboards compare
// spend with them. A file that no longer loads is logged and the limits
// stay as last written; a write ClickHouse fails is tried again every 10 s
// (chstore.LimitWriter).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/profiling"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := run(ctx, os.Args[1:], os.Getenv, hup); err != nil {
		fmt.Fprintln(os.Stderr, "analytics:", err)
		os.Exit(1)
	}
}

// run runs the program until ctx ends. Each value received on reload
// (SIGHUP) rewrites the budget limits from the config file.
func run(ctx context.Context, args []string, getenv func(string) string, reload <-chan os.Signal) error {
	fs := flag.NewFlagSet("analytics", flag.ContinueOnError)
	cfgPath := fs.String("config", getenv("TOLLGATE_CONFIG"), "config file; its nats, log, profiling and budgets sections are used (env TOLLGATE_CONFIG)")
	natsURL := fs.String("nats", "", "NATS URL; overrides the config's nats.url")
	chAddr := fs.String("clickhouse", orDefault(getenv("TOLLGATE_CLICKHOUSE"), "127.0.0.1:9000"),
		"ClickHouse native-protocol address(es), comma-separated (env TOLLGATE_CLICKHOUSE)")
	database := fs.String("database", "tollgate", "ClickHouse database")
	batchSize := fs.Int("batch-size", 10000, "most events per insert")
	batchInterval := fs.Duration("batch-interval", time.Second, "longest an event waits for its batch to fill")
	metrics := fs.String("metrics", "", "address serving /metrics, e.g. 127.0.0.1:9103 (off when empty)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := &config.Config{}
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return err
		}
	}
	log := cfg.Log.NewLogger(os.Stderr)
	if *natsURL != "" {
		cfg.NATS.URL = *natsURL
	}

	// The profiling section is shared with the gateway; its
	// application_name is the gateway's, so this one is fixed.
	stopProfiling, err := profiling.Start(profiling.Config{ServerAddress: cfg.Profiling.ServerAddress,
		ApplicationName: "tollgate.analytics", Tags: cfg.Profiling.Tags, Getenv: getenv}, log)
	if err != nil {
		return err
	}
	defer stopProfiling()

	store, err := chstore.OpenWait(ctx, chstore.Options{
		Addr:     *chAddr,
		Database: *database,
		User:     getenv("CLICKHOUSE_USER"),
		Password: getenv("CLICKHOUSE_PASSWORD"),
	}, log)
	if err != nil || store == nil {
		return err // nil: stopped while waiting for ClickHouse
	}
	defer store.Close()

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
	lo := chstore.LoaderOptions{BatchSize: *batchSize, BatchInterval: *batchInterval, Replicas: cfg.NATS.Replicas,
		Logger: log, Registerer: reg}
	limits := chstore.NewLimitWriter(log)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return chstore.RunLoaders(ctx, store, js, lo, limits) })
	g.Go(func() error {
		if *cfgPath != "" {
			setLimits(limits, cfg, log)
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-reload:
				if *cfgPath == "" {
					log.Warn("reload: no config file, budget limits not written")
					continue
				}
				c, err := config.Load(*cfgPath)
				if err != nil {
					log.Error("reload: budget limits not written", "err", err)
					continue
				}
				setLimits(limits, c, log)
			}
		}
	})
	if *metrics != "" {
		srv := &http.Server{Addr: *metrics, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
			ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics listener: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	log.Info("analytics loader started", "nats", nc.ConnectedUrlRedacted(), "clickhouse", *chAddr, "database", *database)
	err = g.Wait()
	log.Info("analytics loader stopped", "err", err)
	return err
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

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
