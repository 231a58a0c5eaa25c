// Command budget runs the budget consumer (package pkg/budget): it folds the
// usage stream into the spend totals of the tollgate_spend KV bucket and
// raises threshold alerts, until SIGTERM or interrupt, when it finishes the
// batch it is writing and exits.
//
// It reads the nats, budgets and profiling sections of the shared config
// file; with a Pyroscope server configured it sends continuous profiles as
// application tollgate.budget.
// Several instances may run at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/profiling"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "budget:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("budget", flag.ContinueOnError)
	cfgPath := fs.String("config", "tollgate.yaml", "config file (uses its nats and budgets sections)")
	natsURL := fs.String("nats", "", "NATS URL; overrides the config's nats.url")
	var copts budget.ConsumerOptions
	budget.RegisterConsumerFlags(fs, &copts)
	metrics := fs.String("metrics", "", "address serving /metrics, e.g. 127.0.0.1:9102 (off when empty)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	log := cfg.Log.NewLogger(os.Stderr)
	if *natsURL != "" {
		cfg.NATS.URL = *natsURL
	}
	limits, err := budget.ParseLimits(cfg.Budgets)
	if err != nil {
		return err
	}
	if err := budget.ValidateHierarchy(limits, cfg.BudgetOvercommit); err != nil {
		return err
	}

	// The profiling section is shared with the gateway; its
	// application_name is the gateway's, so this one is fixed.
	stopProfiling, err := profiling.Start(profiling.Config{ServerAddress: cfg.Profiling.ServerAddress,
		ApplicationName: "tollgate.budget", Tags: cfg.Profiling.Tags}, log)
	if err != nil {
		return err
	}
	defer stopProfiling()

	nc, err := natsconn.Connect(cfg.NATS, "tollgate-budget", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if _, err := budget.EnsureBucket(ctx, js, cfg.NATS.Replicas); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	copts.Limits, copts.Logger, copts.Registerer = limits, log, reg
	g, ctx := errgroup.WithContext(ctx)
	if err := budget.StartConsumer(ctx, g, js, copts); err != nil {
		return err
	}
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
	log.Info("budget consumer started", "nats", nc.ConnectedUrlRedacted(), "limits", len(limits))
	err = g.Wait()
	log.Info("budget consumer stopped", "err", err)
	return err
}
