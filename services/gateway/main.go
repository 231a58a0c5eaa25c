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
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/mockllm"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/tokenize"
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

	mock, err := startMock(g, cfg, log)
	if err != nil {
		return err
	}
	verifier, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Verifier: verifier, Logger: log, Accounting: acct})
	if err != nil {
		return err
	}
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
		RefuseUnpriced: cfg.Usage.UnpricedModel == config.UnpricedRefuse,
		RateLimits:     cfg.RateLimits, Limiter: ratelimit.New(ratelimit.Options{}),
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
func startMock(g *errgroup.Group, cfg *config.Config, log *slog.Logger) (*mockllm.Server, error) {
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
				return nil, fmt.Errorf("listen for the mock upstream: %w", err)
			}
			m = mockllm.New(mockllm.Config{Logger: log})
			g.Go(func() error { return m.Serve(ln) })
			base = "http://" + ln.Addr().String() + "/v1"
			log.Info("mock upstream started", "addr", ln.Addr().String())
		}
		p.BaseURL = base
	}
	return m, nil
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
	model := "mock-gpt"
	if cfg.Model(model) == nil && len(cfg.Models) > 0 {
		model = cfg.Models[0].Name
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
