// Command gateway is Tollgate's public endpoint: OpenAI-compatible API,
// JWT and API key auth, routing and streaming relay.
//
//	gateway [-config FILE] [-embed] [-data-dir DIR] [-nats-port N]
//
// The config file defaults to $TOLLGATE_CONFIG, else deploy/dev/tollgate.yaml.
// -embed, in a gateway built with -tags embed, runs the all-in-one mode
// (see README): an embedded NATS JetStream server, the budget consumer with
// the budget service's consumer flags (-webhook, -webhook-format,
// -forecast-alerts, -anomaly-factor, -fold-interval) and, built with -tags clickhouse and
// $TOLLGATE_CLICKHOUSE set, what the analytics service runs. GET
// /admin/usage reads the usage stream; built with -tags clickhouse it
// reads ClickHouse when $TOLLGATE_CLICKHOUSE is set.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/owner"
	"github.com/tollgate/tollgate/pkg/profiling"
	"github.com/tollgate/tollgate/pkg/respcache"
	"github.com/tollgate/tollgate/pkg/revoke"
	"github.com/tollgate/tollgate/pkg/tracing"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	cfgPath := flag.String("config", cmp.Or(os.Getenv("TOLLGATE_CONFIG"), "deploy/dev/tollgate.yaml"), "config file (env TOLLGATE_CONFIG)")
	embed := flag.Bool("embed", false, "all-in-one mode (a gateway built with -tags embed): embedded NATS JetStream, the budget consumer and (built with -tags clickhouse, $TOLLGATE_CLICKHOUSE set) the analytics loaders and budget_limits in this process")
	dataDir := flag.String("data-dir", "data", "data directory for -embed (NATS store under nats/, usage spool under spool/)")
	natsPort := flag.Int("nats-port", 4222, "loopback port of the embedded NATS server with -embed (0 picks a free one)")
	var copts budget.ConsumerOptions // -embed's budget consumer
	budget.RegisterConsumerFlags(flag.CommandLine, &copts)
	flag.Parse()
	if f := budget.ConsumerFlagSet(flag.CommandLine); f != "" && !*embed {
		return fmt.Errorf("-%s is for the budget consumer of -embed; without -embed the budget service raises alerts", f)
	}

	// The mock upstream's port is taken while loading, so that providers
	// of kind mock can point at it; it is served further down.
	mock := &mockllm.Local{}
	defer func() { _ = mock.Shutdown() }()
	settings, err := gateway.LoadSettings(*cfgPath, mock.Open)
	if err != nil {
		return err
	}
	cfg := settings.Config
	log := cfg.Log.NewLogger(os.Stderr)
	if settings.KeysErr != nil {
		log.Warn("auth issuer keys not fetched at start; verifying with what each issuer has", "err", settings.KeysErr)
	}

	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Background work (publisher, budget tracker and consumer) outlives the
	// signal: it stops only after the HTTP server has drained.
	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()
	g, bg := errgroup.WithContext(bg)

	nc, closeNATS, err := openNATS(cfg.NATS, &cfg.Usage.SpoolDir, *embed, *dataDir, *natsPort, log)
	if err != nil {
		return err
	}
	defer closeNATS()
	acct, pub, err := gateway.StartAccounting(bg, g, nc, settings, log) // -embed: startEmbedded runs the consumer
	if err != nil {
		return err
	}
	stopProfiling, err := profiling.Start(profiling.Config{ServerAddress: cfg.Profiling.ServerAddress,
		ApplicationName: cfg.Profiling.ApplicationName, Tags: cfg.Profiling.Tags}, log)
	if err != nil {
		return err
	}
	defer stopProfiling()
	tracer, err := tracing.Start(context.Background(), tracing.Config{Endpoint: cfg.Tracing.Endpoint,
		ServiceName: cfg.Tracing.ServiceName, SampleRatio: cfg.Tracing.SampleRatio, Insecure: cfg.Tracing.Insecure}, log)
	if err != nil {
		return err
	}
	if addr := mock.Addr(); addr != "" {
		g.Go(func() error { return mock.Serve(log) })
		log.Info("mock upstream started", "addr", addr)
	}

	reg, m, err := gateway.NewMetrics(acct, pub)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	limits, err := startEmbedded(bg, g, js, *embed, cfg.NATS.Replicas, settings.Limits, copts, acct.Tracker, reg, os.Getenv, log)
	if err != nil {
		return err
	}
	revoked, err := revoke.Start(bg, g, js, cfg.NATS.Replicas, m.RevocationPropagated)
	if err != nil {
		return err
	}
	rec, revoker, err := gateway.StartAudit(bg, js, cfg.NATS.Replicas, reg)
	if err != nil {
		return err
	}
	keys, keyStore, err := apikey.Start(bg, g, js, cfg.NATS.Replicas, m.RevocationPropagated, rec)
	if err != nil {
		return err
	}
	owners, err := owner.Start(bg, g, js, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	opts := gateway.Options{Config: cfg, Verifier: settings.Verifier, Logger: log, Accounting: acct, Metrics: m,
		Revocations: revoked, Keys: keys, Alert: gateway.PublishAlerts(nc, log), Tracer: tracer, Owners: owners}
	if cache, err := respcache.Start(bg, g, js, cfg.Models, cfg.NATS.Replicas); err != nil {
		return err
	} else if cache != nil { // a nil *Cache in the interface would not read as nil
		opts.Cache = cache
	}
	gw, err := gateway.New(opts)
	if err != nil {
		return err
	}
	rl := gateway.NewReloader(*cfgPath, settings, gw, limits, mock.URL, rec, log)
	if *embed { // openNATS put the spool under -data-dir, whatever the file says
		spool := cfg.Usage.SpoolDir
		rl.Override(func(c *config.Config) { c.Usage.SpoolDir = spool })
	}
	if err := rl.RegisterMetrics(reg); err != nil {
		return err
	}
	explainer, closeExplainer := usageExplainer(sigCtx, js, log)
	explainer.Current = gw.Prices // events priced with a price book or config prices break down too
	defer closeExplainer()
	adminSrv, err := admin.Start(cfg.Admin.Listen, admin.Options{
		Gatherer: reg, Verify: rl.Verify, RequireToken: cfg.Admin.RequireToken, AllowedHosts: cfg.Admin.AllowedHosts,
		Ready: gw.Ready, Config: rl.Config, Routes: func() any { return gw.Routes() }, Budgets: func() any { return acct.Tracker.Report() },
		Reload: func(ctx context.Context) (any, error) { return rl.Reload(ctx) }, Usage: explainer.Lookup, Keys: keyStore, Logger: log,
		Revoke: func(ctx context.Context, kind, value, reason string) error {
			return revoker.Revoke(ctx, audit.Actor(ctx), revoke.Kind(kind), value, reason)
		},
		Unrevoke: func(ctx context.Context, kind, value string) error {
			return revoker.Unrevoke(ctx, audit.Actor(ctx), revoke.Kind(kind), value)
		},
	})
	if err != nil {
		return err
	}
	if adminSrv != nil {
		rl.OnApply(func(c *config.Config) { adminSrv.SetRequireToken(c.Admin.RequireToken) })
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	g.Go(func() error { return rl.Run(bg, hup) })
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	gateway.WriteBanner(os.Stdout, cfg, ln.Addr().String(), auth.DevToken(cfg.Auth, time.Now()))
	if err := gateway.WarnDevSecret(reg, log, rl.Config, ln.Addr().String()); err != nil {
		return err
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "models", len(cfg.Models), "embed", *embed)

	serveErr := make(chan error, 1)
	go func() { serveErr <- gw.Serve(ln) }()
	select {
	case <-sigCtx.Done():
	case err = <-serveErr:
		log.Error("server stopped", "err", err)
	case <-bg.Done():
		log.Error("a background service stopped", "err", context.Cause(bg))
	}
	gateway.Shutdown{Gateway: gw, Grace: rl.Config().ShutdownGrace, Mock: mock, Admin: adminSrv, Publisher: pub, Tracer: tracer,
		CancelBG: cancelBG, Wait: g.Wait, Log: log}.Run()
	return nil
}
