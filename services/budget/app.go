package main

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/profiling"
)

// run starts the program's parts in this order, each using those before
// it, and runs until ctx ends:
//
//  1. the logger and the profiler (when a Pyroscope server is configured);
//  2. the NATS connection, and the spend bucket it creates if missing;
//  3. the consumer and the metrics listener.
//
// Shutdown is the reverse: on ctx's end the consumer finishes the batch it
// is writing and the metrics listener closes (5 s at most), then the NATS
// connection closes, then the profiler sends what it holds.
func (s settings) run(ctx context.Context) error {
	cfg := s.cfg
	log := cfg.Log.NewLogger(os.Stderr)
	// The profiling section is shared with the gateway; its
	// application_name is the gateway's, so this one is fixed.
	stopProfiling, err := profiling.Start(profiling.Config{ServerAddress: cfg.Profiling.ServerAddress,
		ApplicationName: "tollgate.budget", Tags: cfg.Profiling.Tags, Getenv: s.getenv}, log)
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
	if _, err := budget.EnsureBucket(ctx, js, cfg.NATS.Replicas); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	copts := s.consumer
	copts.Limits, copts.Logger, copts.Registerer = s.limits, log, reg
	g, ctx := errgroup.WithContext(ctx)
	if err := budget.StartConsumer(ctx, g, js, copts); err != nil {
		return err
	}
	metrics.Serve(ctx, g, s.metrics, reg)
	log.Info("budget consumer started", "nats", nc.ConnectedUrlRedacted(), "limits", len(s.limits))
	err = g.Wait()
	log.Info("budget consumer stopped", "err", err)
	return err
}
