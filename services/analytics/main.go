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
//
// main.go turns flags and environment into settings; app.go starts the
// program's parts from them, in order.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := run(ctx, os.Args[1:], os.Getenv, hup); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "analytics:", err)
		os.Exit(1)
	}
}

// run runs the program until ctx ends. Each value received on reload
// (SIGHUP) rewrites the budget limits from the config file.
func run(ctx context.Context, args []string, getenv func(string) string, reload <-chan os.Signal) error {
	s, err := parseSettings(args, getenv)
	if err != nil {
		return err
	}
	return s.run(ctx, reload)
}

// settings is everything the program takes from its flags, its config file
// and its environment; nothing else reads them.
type settings struct {
	cfgPath string         // "" when run without a config file
	cfg     *config.Config // the file's config, or an empty one
	store   chstore.Options
	loader  chstore.LoaderOptions
	metrics string // address of the metrics listener; "" for none
	getenv  func(string) string
	// migrateOnly ends the program once the schema is migrated (-migrate).
	migrateOnly bool
}

func parseSettings(args []string, getenv func(string) string) (settings, error) {
	s := settings{getenv: getenv, cfg: &config.Config{}}
	fs := flag.NewFlagSet("analytics", flag.ContinueOnError)
	fs.StringVar(&s.cfgPath, "config", getenv("TOLLGATE_CONFIG"), "config file; its nats, clickhouse, log, profiling and budgets sections are used (env TOLLGATE_CONFIG)")
	natsURL := fs.String("nats", "", "NATS URL; overrides the config's nats.url")
	fs.StringVar(&s.store.Addr, "clickhouse", orDefault(getenv("TOLLGATE_CLICKHOUSE"), "127.0.0.1:9000"),
		"ClickHouse native-protocol address(es), comma-separated (env TOLLGATE_CLICKHOUSE)")
	fs.StringVar(&s.store.Database, "database", "tollgate", "ClickHouse database")
	fs.IntVar(&s.loader.BatchSize, "batch-size", 10000, "most events per insert")
	fs.DurationVar(&s.loader.BatchInterval, "batch-interval", time.Second, "longest an event waits for its batch to fill")
	fs.StringVar(&s.metrics, "metrics", "", "address serving /metrics, e.g. 127.0.0.1:9103 (off when empty)")
	fs.BoolVar(&s.migrateOnly, "migrate", false, "apply the ClickHouse migrations (ON CLUSTER with the config's clickhouse.cluster) and exit, loading nothing")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	s.store.User, s.store.Password = getenv("CLICKHOUSE_USER"), getenv("CLICKHOUSE_PASSWORD")
	if s.cfgPath != "" {
		cfg, err := config.LoadEnv(s.cfgPath, getenv)
		if err != nil {
			return s, err
		}
		s.cfg = cfg
	}
	if *natsURL != "" {
		s.cfg.NATS.URL = *natsURL
	}
	s.loader.Replicas = s.cfg.NATS.Replicas
	s.store.Cluster, s.store.ReplicaPath = s.cfg.ClickHouse.Cluster, s.cfg.ClickHouse.ReplicaPath
	return s, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
