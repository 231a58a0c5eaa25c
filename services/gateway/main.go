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
	"syscall"
	"time"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/mockllm"
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
	embed := flag.Bool("embed", false, "all-in-one mode: embedded NATS JetStream and in-process consumers")
	dataDir := flag.String("data-dir", "data", "data directory for -embed (NATS store, spool)")
	flag.Parse()

	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log)
	_ = dataDir
	_ = embed

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g, ctx := errgroup.WithContext(ctx)

	mock, err := startMock(g, cfg, log)
	if err != nil {
		return err
	}
	verifier, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Verifier: verifier, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	printBanner(cfg, ln.Addr().String())
	log.Info("gateway listening", "addr", ln.Addr().String(), "models", len(cfg.Models))

	g.Go(func() error { return gw.Serve(ln) })
	g.Go(func() error {
		<-ctx.Done()
		log.Info("shutting down", "grace", cfg.ShutdownGrace)
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
		defer cancel()
		err := gw.Shutdown(sctx)
		if mock != nil {
			_ = mock.Shutdown()
		}
		return err
	})
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("stopped")
	return nil
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

func newLogger(c config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
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
