//go:build !clickhouse

package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/usage"
)

// usageExplainer answers GET /admin/usage/{request_id} by scanning the last
// 24 hours of the usage stream. Reading ClickHouse instead
// (TOLLGATE_CLICKHOUSE) needs a gateway built with -tags clickhouse; this
// one says so when the variable is set. The returned func closes nothing.
func usageExplainer(_ context.Context, js jetstream.JetStream, log *slog.Logger) (*billing.Explainer, func()) {
	if addr := os.Getenv("TOLLGATE_CLICKHOUSE"); addr != "" {
		log.Warn("usage lookups read the stream: this gateway was built without clickhouse lookups (go build -tags clickhouse)", "addr", addr)
	}
	return &billing.Explainer{Stream: usage.StreamName, Window: billing.DefaultStreamWindow, JS: js}, func() {}
}

// limitSetter takes the budget limits of the config at start and of every
// reload; *budget.Tracker is one.
type limitSetter interface{ SetLimits(limits []budget.Limit) }

// startEmbedded runs, with embed (-embed), what the budget service runs:
// the budget consumer of copts (the alert flags; limits, logger and
// registry are set here), raising threshold, forecast and anomaly alerts,
// in g until ctx ends. This gateway was built without the ClickHouse
// driver, so the analytics service's part (the loaders, budget_limits) is
// not run; when TOLLGATE_CLICKHOUSE is set it says how to get it. The
// limits of every reload go to the returned tracker.
func startEmbedded(ctx context.Context, g *errgroup.Group, js jetstream.JetStream, embed bool, _ int, limits []budget.Limit,
	copts budget.ConsumerOptions, tracker limitSetter, reg prometheus.Registerer, getenv func(string) string, log *slog.Logger) (limitSetter, error) {
	if !embed {
		return tracker, nil
	}
	copts.Limits, copts.Logger, copts.Registerer = limits, log, reg
	if err := budget.StartConsumer(ctx, g, js, copts); err != nil {
		return nil, err
	}
	if addr := getenv("TOLLGATE_CLICKHOUSE"); addr != "" {
		log.Warn("analytics not run in -embed: this gateway was built without clickhouse (go build -tags clickhouse); run the analytics service instead", "addr", addr)
	}
	return tracker, nil
}
