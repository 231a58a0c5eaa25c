package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/console"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/owner"
	"github.com/tollgate/tollgate/pkg/profiling"
	"github.com/tollgate/tollgate/pkg/respcache"
	"github.com/tollgate/tollgate/pkg/revoke"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/tollgate/tollgate/pkg/usage"
)

// app is one gateway process. run starts its parts in this order, each
// built from those before it:
//
//  1. config: the mock upstream's port (so that providers of kind mock can
//     point at it), the config file and its settings, the logger;
//  2. NATS: the embedded server with -embed, else a connection to
//     nats.url;
//  3. accounting: the usage publisher, the budget tracker and the
//     rate-limit presence (startAccounting); the profiler, the
//     tracer, the mock upstream;
//  4. the metrics registry, and with -embed the budget consumer and the
//     analytics loaders (startEmbedded);
//  5. the stores on NATS KV: revocations, audit, API keys, owners of files
//     and batches, the response cache;
//  6. the gateway, its reloader (SIGHUP, /admin/reload), the usage
//     explainer, the web console and the admin listener;
//  7. the public listener.
//
// It runs until SIGINT or SIGTERM, or until the server or a background part
// stops, then stops in shutdown's order (wiring.go): the public server drains
// (at most shutdown_grace), the mock upstream and the admin listener stop,
// the usage publisher flushes, the background work (tracker, presence,
// stores, -embed's consumer and loaders) is cancelled and awaited, the
// tracer flushes. Then the parts registered with onStop stop in the
// reverse of their start: the explainer's ClickHouse connection, the
// profiler, NATS (an embedded server last of all), the mock's listener.
type app struct {
	s     settings
	stops []func() // run in reverse by stop

	sigCtx   context.Context // ends on SIGINT or SIGTERM
	bg       context.Context // background work: ends after the HTTP server drained
	cancelBG context.CancelFunc
	g        *errgroup.Group

	mock     *mockllm.Local
	settings *gateway.Settings
	cfg      *config.Config
	log      *slog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	acct     gateway.Accounting
	pub      *usage.Publisher
	tracer   *tracing.Tracer
	reg      *prometheus.Registry
	m        *metrics.Gateway
	limits   limitSetter
	opts     gateway.Options
	audit    *audit.Recorder
	revoker  *revoke.Revoker
	keyStore *apikey.Store
	gw       *gateway.Gateway
	rl       *gateway.Reloader
	adminSrv *admin.Server
	console  *console.Console // nil: console.enabled is false or the admin listener is off
}

// run starts the gateway process and serves until it stops.
func (s settings) run() error {
	a := &app{s: s}
	defer a.stop()
	for _, step := range []func() error{a.loadConfig, a.openNATS, a.startAccounting, a.startMetrics, a.startEmbedded, a.startStores, a.newGateway, a.startAdmin} {
		if err := step(); err != nil {
			return err
		}
	}
	return a.serve()
}

// onStop registers f to run when the process stops, before what was
// registered earlier.
func (a *app) onStop(f func()) { a.stops = append(a.stops, f) }

func (a *app) stop() {
	for i := len(a.stops) - 1; i >= 0; i-- {
		a.stops[i]()
	}
}

func (a *app) loadConfig() error {
	a.mock = &mockllm.Local{} // its port is taken while loading; it is served in startAccounting
	a.onStop(func() { _ = a.mock.Shutdown() })
	settings, err := gateway.LoadSettings(a.s.cfgPath, a.mock.Open)
	if err != nil {
		return err
	}
	a.settings, a.cfg = settings, settings.Config
	a.log = a.cfg.Log.NewLogger(os.Stderr)
	if settings.KeysErr != nil {
		a.log.Warn("auth issuer keys not fetched at start; verifying with what each issuer has", "err", settings.KeysErr)
	}
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	a.onStop(stopSignals)
	// Background work (publisher, budget tracker and consumer) outlives the
	// signal: it stops only after the HTTP server has drained.
	bg, cancelBG := context.WithCancel(context.Background())
	a.onStop(cancelBG)
	a.sigCtx, a.cancelBG = sigCtx, cancelBG
	a.g, a.bg = errgroup.WithContext(bg)
	return nil
}

func (a *app) openNATS() error {
	nc, closeNATS, err := openNATS(a.cfg.NATS, &a.cfg.Usage.SpoolDir, a.s.embed, a.s.dataDir, a.s.natsPort, a.log)
	if err != nil {
		return err
	}
	a.onStop(closeNATS)
	a.nc = nc
	if a.js, err = jetstream.New(nc); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}

func (a *app) startAccounting() error {
	cfg, log := a.cfg, a.log
	var err error
	if a.acct, a.pub, err = startAccounting(a.bg, a.g, a.nc, a.settings, log); err != nil { // -embed: startEmbedded runs the consumer
		return err
	}
	stopProfiling, err := profiling.Start(profiling.Config{ServerAddress: cfg.Profiling.ServerAddress,
		ApplicationName: cfg.Profiling.ApplicationName, Tags: cfg.Profiling.Tags, Getenv: a.s.getenv}, log)
	if err != nil {
		return err
	}
	a.onStop(stopProfiling)
	if a.tracer, err = tracing.Start(context.Background(), tracing.Config{Endpoint: cfg.Tracing.Endpoint,
		ServiceName: cfg.Tracing.ServiceName, SampleRatio: cfg.Tracing.SampleRatio, Insecure: cfg.Tracing.Insecure}, log); err != nil {
		return err
	}
	if addr := a.mock.Addr(); addr != "" {
		a.g.Go(func() error { return a.mock.Serve(log) })
		log.Info("mock upstream started", "addr", addr)
	}
	return nil
}

func (a *app) startMetrics() error {
	var err error
	a.reg, a.m, err = newMetrics(a.acct, a.pub)
	return err
}

func (a *app) startStores() error {
	cfg, bg, g, js, m := a.cfg, a.bg, a.g, a.js, a.m
	revoked, err := revoke.Start(bg, g, js, cfg.NATS.Replicas, m.RevocationPropagated)
	if err != nil {
		return err
	}
	if a.audit, a.revoker, err = startAudit(bg, js, cfg.NATS.Replicas, a.reg); err != nil {
		return err
	}
	keys, keyStore, err := apikey.Start(bg, g, js, cfg.NATS.Replicas, m.RevocationPropagated, a.audit)
	if err != nil {
		return err
	}
	owners, err := owner.Start(bg, g, js, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	a.keyStore = keyStore
	a.opts = gateway.Options{Config: cfg, Verifier: a.settings.Verifier, Logger: a.log, Accounting: a.acct, Metrics: m,
		Revocations: revoked, Keys: keys, Alert: publishAlerts(a.nc, a.log), Tracer: a.tracer, Owners: owners}
	if cache, err := respcache.Start(bg, g, js, cfg.Models, cfg.NATS.Replicas); err != nil {
		return err
	} else if cache != nil { // a nil *Cache in the interface would not read as nil
		a.opts.Cache = cache
	}
	return nil
}

func (a *app) newGateway() error {
	var err error
	if a.gw, err = gateway.New(a.opts); err != nil {
		return err
	}
	a.rl = gateway.NewReloader(a.s.cfgPath, a.settings, a.gw, a.limits, a.mock.URL, a.audit, a.log)
	if a.s.embed { // openNATS put the spool under -data-dir, whatever the file says
		spool := a.cfg.Usage.SpoolDir
		a.rl.Override(func(c *config.Config) { c.Usage.SpoolDir = spool })
	}
	return a.rl.RegisterMetrics(a.reg)
}

func (a *app) startAdmin() error {
	cfg, gw, rl := a.cfg, a.gw, a.rl
	explainer, closeExplainer := usageExplainer(a.sigCtx, a.js, a.s.getenv, a.log)
	explainer.Current = gw.Prices // events priced with a price book or config prices break down too
	a.onStop(closeExplainer)
	tracker := a.acct.Tracker
	if err := a.startConsole(explainer); err != nil {
		return err
	}
	var ui http.Handler
	if a.console != nil { // a nil *Console in the interface would not read as nil
		ui = a.console
	}
	var err error
	a.adminSrv, err = admin.Start(cfg.Admin.Listen, admin.Options{Console: ui,
		Gatherer: a.reg, Verify: rl.Verify, RequireToken: cfg.Admin.RequireToken, AllowedHosts: cfg.Admin.AllowedHosts,
		Ready: gw.Ready, Config: rl.Config, Routes: func() any { return gw.Routes() }, Budgets: func() any { return tracker.Report() },
		Reload: func(ctx context.Context) (any, error) { return rl.Reload(ctx) }, Usage: explainer.Lookup, Keys: a.keyStore, Logger: a.log,
		Revoke: func(ctx context.Context, kind, value, reason string) error {
			return a.revoker.Revoke(ctx, audit.Actor(ctx), revoke.Kind(kind), value, reason)
		},
		Unrevoke: func(ctx context.Context, kind, value string) error {
			return a.revoker.Unrevoke(ctx, audit.Actor(ctx), revoke.Kind(kind), value)
		},
	})
	if err != nil {
		return err
	}
	if a.adminSrv != nil {
		srv := a.adminSrv
		rl.OnApply(func(c *config.Config) { srv.SetRequireToken(c.Admin.RequireToken) })
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	a.onStop(func() { signal.Stop(hup) })
	a.g.Go(func() error { return rl.Run(a.bg, hup) })
	return nil
}

// startConsole builds the web console served under /ui/ on the admin
// listener, its sessions in a KV bucket every replica shares; its read
// pages read the spend totals the gateway admits requests by, and
// ClickHouse when the explainer reads it.
func (a *app) startConsole(explainer *billing.Explainer) error {
	cfg := a.cfg
	if !cfg.Console.On() || cfg.Admin.Listen == admin.Off {
		return nil
	}
	ctx, cancel := context.WithTimeout(a.bg, 30*time.Second)
	defer cancel()
	sessions, err := console.EnsureSessions(ctx, a.js, cfg.Console.SessionTTL, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	js, gw := a.js, a.gw
	data := &console.Data{Totals: a.acct.Tracker, CH: historyConn(explainer), Explainer: explainer, Routes: gw.Routes}
	a.console, err = console.New(console.Options{Config: a.rl.Config, Keys: a.keyStore, Audit: a.audit, Sessions: sessions, Logger: a.log,
		AuditLog: func(ctx context.Context, since time.Time) ([]audit.Event, error) { return audit.List(ctx, js, since) },
		Pages:    console.PageOptions{Data: data}})
	return err
}

// serve listens on the public address and serves until a signal, the
// server's end or a background part's, then shuts down in order.
func (a *app) serve() error {
	cfg, log := a.cfg, a.log
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	writeBanner(os.Stdout, cfg, ln.Addr().String(), auth.DevToken(cfg.Auth, time.Now()))
	if a.console != nil {
		if err := a.console.PrintLink(os.Stdout, a.adminSrv.Addr(), a.rl.Config().Admin.RequireToken); err != nil {
			log.Warn("console sign-in link not printed", "err", err)
		}
	}
	if err := warnDevSecret(a.reg, log, a.rl.Config, ln.Addr().String()); err != nil {
		return err
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "models", len(cfg.Models), "embed", a.s.embed)
	serveErr := make(chan error, 1)
	go func() { serveErr <- a.gw.Serve(ln) }()
	select {
	case <-a.sigCtx.Done():
	case err = <-serveErr:
		log.Error("server stopped", "err", err)
	case <-a.bg.Done():
		log.Error("a background service stopped", "err", context.Cause(a.bg))
	}
	shutdown{Gateway: a.gw, Grace: a.rl.Config().ShutdownGrace, Mock: a.mock, Admin: a.adminSrv, Publisher: a.pub, Tracer: a.tracer,
		CancelBG: a.cancelBG, Wait: a.g.Wait, Log: log}.Run()
	return nil
}
