// Command gateway is Tollgate's public endpoint: OpenAI-compatible API,
// JWT auth, routing and streaming relay.
//
//	gateway [-config FILE] [-embed] [-data-dir DIR]
//
// The config file defaults to $TOLLGATE_CONFIG, else deploy/dev/tollgate.yaml.
// -embed runs the all-in-one mode (see README).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/finance"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/profiling"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/respcache"
	"github.com/tollgate/tollgate/pkg/revoke"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/tollgate/tollgate/pkg/usage"
	"golang.org/x/sync/errgroup"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	defConfig := os.Getenv("TOLLGATE_CONFIG")
	if defConfig == "" {
		defConfig = "deploy/dev/tollgate.yaml"
	}
	cfgPath := flag.String("config", defConfig, "config file (env TOLLGATE_CONFIG)")
	embed := flag.Bool("embed", false, "all-in-one mode: embedded NATS JetStream and the budget consumer in this process")
	dataDir := flag.String("data-dir", "data", "data directory for -embed (NATS store under nats/, usage spool under spool/)")
	natsPort := flag.Int("nats-port", 4222, "loopback port of the embedded NATS server with -embed (0 picks a free one)")
	flag.Parse()

	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	log := cfg.Log.NewLogger(os.Stderr)

	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Background work (publisher, budget tracker and consumer) outlives the
	// signal: it stops only after the HTTP server has drained.
	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()
	g, bg := errgroup.WithContext(bg)

	nc, embedded, err := connectNATS(cfg, *embed, *dataDir, *natsPort, log)
	if err != nil {
		return err
	}
	defer func() {
		_ = nc.Drain()
		if embedded != nil {
			embedded.Shutdown()
		}
	}()
	if *embed {
		cfg.Usage.SpoolDir = filepath.Join(*dataDir, "spool")
	}
	acct, pub, err := startAccounting(bg, g, cfg, nc, *embed, log)
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
	defer func() {
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer tcancel()
		_ = tracer.Shutdown(tctx)
	}()

	mock, mockURL, err := startMock(g, cfg, log)
	if err != nil {
		return err
	}
	verifier, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		return err
	}
	if err := registerCollectors(reg, pub, acct.Tracker); err != nil {
		return err
	}
	revoked, err := startRevocations(bg, g, cfg, nc, m)
	if err != nil {
		return err
	}
	alert := func(subject string, data []byte) {
		if err := nc.Publish(subject, data); err != nil {
			log.Warn("budget alert not published", "subject", subject, "err", err)
		}
	}
	cache, err := startCache(bg, g, cfg, nc)
	if err != nil {
		return err
	}
	opts := gateway.Options{Config: cfg, Verifier: verifier, Logger: log, Accounting: acct, Metrics: m,
		Revocations: revoked, Alert: alert, Tracer: tracer}
	if cache != nil { // a nil *Cache in the interface would not read as nil
		opts.Cache = cache
	}
	gw, err := gateway.New(opts)
	if err != nil {
		return err
	}
	rl := &reloader{path: *cfgPath, gw: gw, tracker: acct.Tracker, mockURL: mockURL, log: log}
	rl.cfg.Store(cfg)
	rl.verifier.Store(verifier)
	explainer, closeExplainer := usageExplainer(sigCtx, nc, log)
	defer closeExplainer()
	adminSrv, err := startAdmin(cfg, reg, rl, gw, acct.Tracker, explainer, log)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if _, err := rl.reload(); err != nil {
				log.Error("config reload refused; the running config stays", "err", err)
			}
		}
	}()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	printBanner(cfg, ln.Addr().String())
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
	log.Info("shutting down", "grace", cfg.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := gw.Shutdown(sctx); err != nil {
		log.Warn("in-flight requests cut at the end of the grace period", "err", err)
	}
	if mock != nil {
		_ = mock.Shutdown()
	}
	if adminSrv != nil {
		actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = adminSrv.Shutdown(actx)
		acancel()
	}
	// Flush every usage event of the drained requests before stopping.
	cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer ccancel()
	if err := pub.Close(cctx); err != nil {
		log.Error("usage publisher close", "err", err)
	}
	st := pub.Stats()
	log.Info("usage publisher closed", "published", st.Published, "spooled", st.Spooled, "dropped", st.Dropped)
	cancelBG()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("background services", "err", err)
	}
	log.Info("stopped")
	return nil
}

// connectNATS starts the embedded server (-embed) or connects to the
// configured one.
func connectNATS(cfg *config.Config, embed bool, dataDir string, port int, log *slog.Logger) (*nats.Conn, *natsconn.Embedded, error) {
	if embed {
		e, err := natsconn.Embed(filepath.Join(dataDir, "nats"), port)
		if err != nil {
			return nil, nil, err
		}
		nc, err := e.Connect("tollgate-gateway", log)
		if err != nil {
			e.Shutdown()
			return nil, nil, err
		}
		log.Info("embedded NATS JetStream started", "url", e.URL(), "store", filepath.Join(dataDir, "nats"))
		return nc, e, nil
	}
	if cfg.NATS.URL == "" {
		return nil, nil, errors.New("usage events need NATS: set nats.url in the config, or run with -embed")
	}
	nc, err := natsconn.Connect(cfg.NATS, "tollgate-gateway", log)
	return nc, nil, err
}

// startAccounting sets up the usage stream, the spend bucket and its
// in-memory tracker, the publisher and, in all-in-one mode, the budget
// consumer.
func startAccounting(ctx context.Context, g *errgroup.Group, cfg *config.Config, nc *nats.Conn, embed bool, log *slog.Logger) (gateway.Accounting, *usage.Publisher, error) {
	var acct gateway.Accounting
	ucfg := usage.Config{
		Buffer: cfg.Usage.Buffer, SpoolDir: cfg.Usage.SpoolDir, SpoolMaxBytes: cfg.Usage.SpoolMaxBytes,
		SyncInterval: cfg.Usage.SyncInterval, FailClosed: cfg.Usage.FailClosed,
	}
	js, err := jetstream.New(nc, ucfg.JetStreamOptions()...)
	if err != nil {
		return acct, nil, fmt.Errorf("jetstream: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := usage.EnsureStream(sctx, js, usage.StreamConfig{Replicas: cfg.NATS.Replicas, MaxAge: cfg.NATS.MaxAge, DuplicateWindow: cfg.NATS.DuplicateWindow}); err != nil {
		return acct, nil, err
	}
	kv, err := budget.EnsureBucket(sctx, js, cfg.NATS.Replicas)
	if err != nil {
		return acct, nil, err
	}
	limits, err := budget.ParseLimits(cfg.Budgets)
	if err != nil {
		return acct, nil, err
	}
	if err := budget.ValidateHierarchy(limits, cfg.BudgetOvercommit); err != nil {
		return acct, nil, err
	}
	prices, err := priceTable(cfg)
	if err != nil {
		return acct, nil, err
	}
	tracker := budget.NewTracker(budget.TrackerOptions{Limits: limits})
	g.Go(func() error { return tracker.Run(ctx, kv) })
	select {
	case <-tracker.Ready():
	case <-sctx.Done():
		return acct, nil, errors.New("budget totals did not load within 30s")
	}
	res := gateway.NewReservations()
	ucfg.OnAck = res.Acked
	pub, err := usage.NewPublisher(js, ucfg, log)
	if err != nil {
		return acct, nil, err
	}
	g.Go(func() error { return pub.Run(ctx) })
	g.Go(func() error { return sweepReservations(ctx, res, log) })
	if embed {
		consumer, err := budget.NewConsumer(js, budget.ConsumerOptions{Limits: limits, Logger: log})
		if err != nil {
			return acct, nil, err
		}
		g.Go(func() error { return consumer.Run(ctx) })
	}
	acct = gateway.Accounting{
		Publisher: pub, Reservations: res, Tracker: tracker, Prices: prices,
		Limiter:   ratelimit.New(ratelimit.Options{}),
		Estimator: tokenize.New(),
	}
	return acct, pub, nil
}

// priceTable is the embedded table with the config's overrides.
func priceTable(cfg *config.Config) (*pricing.Table, error) {
	t := pricing.Default()
	if len(cfg.Prices) == 0 {
		return t, nil
	}
	over := make(map[string]pricing.Price, len(cfg.Prices))
	for model, p := range cfg.Prices {
		pr, err := pricing.ParsePrice(p.Input, p.Output, p.CachedInput, p.PerRequest)
		if err == nil {
			pr, err = pr.WithUnits(p.PerImage, p.PerAudioSecond, p.Per1MCharacters)
		}
		if err != nil {
			return nil, fmt.Errorf("prices.%s: %w", model, err)
		}
		over[model] = pr
	}
	return t.With(over, ""), nil
}

// sweepReservations releases budget reservations whose usage event went to
// the spool instead of the stream (no ack within two minutes).
func sweepReservations(ctx context.Context, res *gateway.Reservations, log *slog.Logger) error {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if n := res.Sweep(2 * time.Minute); n > 0 {
				log.Warn("released budget reservations of unacknowledged usage events", "count", n)
			}
		}
	}
}

// startMock serves providers of kind "mock" with one in-process mock
// upstream on a loopback port, pointing their base URL at it.
func startMock(g *errgroup.Group, cfg *config.Config, log *slog.Logger) (*mockllm.Server, string, error) {
	var m *mockllm.Server
	var base string
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		if p.Kind != "mock" {
			continue
		}
		if m == nil {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, "", fmt.Errorf("listen for the mock upstream: %w", err)
			}
			m = mockllm.New(mockllm.Config{Logger: log})
			g.Go(func() error { return m.Serve(ln) })
			base = "http://" + ln.Addr().String() + "/v1"
			log.Info("mock upstream started", "addr", ln.Addr().String())
		}
		p.BaseURL = base
	}
	return m, base, nil
}

// printBanner tells a first-time user how to call the gateway, with a dev
// token minted for the first HMAC issuer when there is one.
func printBanner(cfg *config.Config, addr string) {
	url := "http://" + addr
	fmt.Printf("\nTollgate is listening on %s\n", url)
	tok := devToken(cfg)
	if tok == "" {
		fmt.Printf("Mint a token with `tollctl token` and call %s/v1/chat/completions.\n\n", url)
		return
	}
	model, ok := cfg.ExampleChatModel()
	if !ok {
		fmt.Printf("A development token (valid 24h): %s\nEvery chat model is a wildcard route: send a concrete name it matches.\n\n", tok)
		return
	}
	fmt.Printf("A development token (valid 24h) is in the commands below.\n\n")
	fmt.Printf("  curl -s %s/v1/chat/completions \\\n    -H 'Authorization: Bearer %s' \\\n    -H 'Content-Type: application/json' \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n\n", url, tok, model)
	fmt.Printf("Streaming:\n\n  curl -sN %s/v1/chat/completions \\\n    -H 'Authorization: Bearer %s' \\\n    -H 'Content-Type: application/json' \\\n    -d '{\"model\":\"%s\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n\n", url, tok, model)
}

// devToken mints a token for the issuer named "dev" when it has an HMAC
// secret, or returns "".
func devToken(cfg *config.Config) string {
	for _, is := range cfg.Auth.Issuers {
		if is.Name != "dev" {
			continue
		}
		for _, k := range is.Keys {
			if k.Secret == "" {
				continue
			}
			tok, err := auth.Mint(auth.MintOptions{
				Issuer: is.Issuer, Audience: is.Audience, Subject: "dev-user", Dept: "dev", Team: "dev",
				Project: "playground", TTL: 24 * time.Hour, KID: k.KID, Key: []byte(k.Secret), Claims: is.Claims,
				Alg: is.Algorithms[0],
			}, time.Now())
			if err == nil {
				return tok
			}
		}
	}
	return ""
}

// registerCollectors exports the publisher's counters and the budget state
// at scrape time.
func registerCollectors(reg *prometheus.Registry, pub *usage.Publisher, tr *budget.Tracker) error {
	err := metrics.RegisterPublisher(reg, func() metrics.PublisherStats {
		st := pub.Stats()
		return metrics.PublisherStats{Queued: int64(st.Queued), Published: int64(st.Published), Spooled: int64(st.Spooled),
			Drained: int64(st.Drained), Failed: int64(st.Failed), Dropped: int64(st.Dropped),
			QueueLen: int64(st.QueueLen), SpoolBytes: int64(st.SpoolBytes)}
	})
	if err != nil {
		return err
	}
	return metrics.RegisterBudgets(reg, func() metrics.BudgetStats {
		var bs metrics.BudgetStats
		for _, l := range tr.Report() {
			bs.Utilization = append(bs.Utilization, metrics.BudgetUtilization{Scope: l.Scope, Value: l.Value, Period: l.Period + ":" + l.PeriodStart, Ratio: l.Utilization})
		}
		for sc := range budget.NumScopes {
			s := budget.Scope(sc)
			bs.Reserved = append(bs.Reserved, metrics.BudgetReserved{Scope: s.String(), Value: "*", Nano: tr.Reserved(s)})
		}
		return bs
	})
}

// startAdmin serves the admin API unless admin.listen is "off".
func startAdmin(cfg *config.Config, reg *prometheus.Registry, rl *reloader, gw *gateway.Gateway, tr *budget.Tracker,
	ex *billing.Explainer, log *slog.Logger) (*admin.Server, error) {
	if cfg.Admin.Listen == "off" {
		return nil, nil
	}
	srv := admin.New(admin.Options{
		Gatherer:     reg,
		Verify:       func(tok []byte) (*auth.Principal, error) { return rl.verifier.Load().Verify(tok) },
		RequireToken: cfg.Admin.RequireToken,
		Ready:        func() error { return nil },
		Config:       rl.cfg.Load,
		Routes:       func() any { return gw.Routes() },
		Budgets:      func() any { return tr.Report() },
		Reload:       func(context.Context) (any, error) { return rl.reload() },
		Usage:        ex.Lookup,
		Logger:       log,
	})
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin listen %s: %w", cfg.Admin.Listen, err)
	}
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Error("admin listener stopped", "err", err)
		}
	}()
	log.Info("admin listening", "addr", ln.Addr().String())
	return srv, nil
}

// usageExplainer answers GET /admin/usage/{request_id}: from ClickHouse
// when TOLLGATE_CLICKHOUSE names a server (database TOLLGATE_CLICKHOUSE_DB,
// default tollgate; CLICKHOUSE_USER / CLICKHOUSE_PASSWORD), else by
// scanning the last 24 hours of the usage stream. The returned func closes
// the ClickHouse connection, if any.
func usageExplainer(ctx context.Context, nc *nats.Conn, log *slog.Logger) (*billing.Explainer, func()) {
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
	if js, err := jetstream.New(nc); err == nil {
		ex.JS = js
	}
	return ex, func() {}
}

// reloader re-reads the config file (SIGHUP, POST /admin/reload) and
// applies it to new requests; an invalid file changes nothing.
type reloader struct {
	path     string
	gw       *gateway.Gateway
	tracker  *budget.Tracker
	mockURL  string
	log      *slog.Logger
	cfg      atomic.Pointer[config.Config]
	verifier atomic.Pointer[auth.Verifier]
	mu       sync.Mutex
}

// reloadSummary is what a successful reload reports.
type reloadSummary struct {
	Providers int    `json:"providers"`
	Models    int    `json:"models"`
	Issuers   int    `json:"issuers"`
	Budgets   int    `json:"budgets"`
	Prices    string `json:"pricing_version"`
}

func (r *reloader) reload() (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, err := config.Load(r.path)
	if err != nil {
		return nil, err
	}
	for i := range cfg.Providers {
		if cfg.Providers[i].Kind == config.KindMock {
			if r.mockURL == "" {
				return nil, errors.New("a mock provider was added; it needs a restart")
			}
			cfg.Providers[i].BaseURL = r.mockURL
		}
	}
	v, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		return nil, err
	}
	prices, err := priceTable(cfg)
	if err != nil {
		return nil, err
	}
	limits, err := budget.ParseLimits(cfg.Budgets)
	if err != nil {
		return nil, err
	}
	if err := budget.ValidateHierarchy(limits, cfg.BudgetOvercommit); err != nil {
		return nil, err
	}
	if err := r.gw.Reload(cfg, v, prices); err != nil {
		return nil, err
	}
	r.tracker.SetLimits(limits)
	r.cfg.Store(cfg)
	r.verifier.Store(v)
	sum := reloadSummary{Providers: len(cfg.Providers), Models: len(cfg.Models), Issuers: len(cfg.Auth.Issuers), Budgets: len(limits), Prices: prices.Version}
	r.log.Info("config reloaded", "providers", sum.Providers, "models", sum.Models, "issuers", sum.Issuers, "budgets", sum.Budgets)
	return sum, nil
}

// startRevocations watches the revocation bucket; the first load must
// finish before serving, so a revoked token is never accepted at start.
func startRevocations(ctx context.Context, g *errgroup.Group, cfg *config.Config, nc *nats.Conn, m *metrics.Gateway) (*revoke.Watcher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := revoke.EnsureBucket(sctx, js, cfg.NATS.Replicas)
	if err != nil {
		return nil, err
	}
	w := revoke.NewWatcher(time.Now, m.RevocationPropagated)
	g.Go(func() error { return w.Run(ctx, kv) })
	select {
	case <-w.Ready():
		return w, nil
	case <-sctx.Done():
		return nil, errors.New("revocations did not load within 30s")
	}
}

// startCache opens the response cache bucket when a model caches answers.
func startCache(ctx context.Context, g *errgroup.Group, cfg *config.Config, nc *nats.Conn) (*respcache.Cache, error) {
	ttl := respcache.BucketTTL(cfg.Models)
	if ttl <= 0 {
		return nil, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := respcache.Open(sctx, js, respcache.Options{TTL: ttl, Replicas: cfg.NATS.Replicas})
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return c.Run(ctx) })
	return c, nil
}
