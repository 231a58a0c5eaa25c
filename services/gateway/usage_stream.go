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

// startAnalytics says, when TOLLGATE_CLICKHOUSE is set, that this
// gateway was built without the ClickHouse driver, so -embed does not run
// the analytics service's part (the loaders, budget_limits). The limits of
// every reload go to tracker alone.
func startAnalytics(_ context.Context, _ *errgroup.Group, _ jetstream.JetStream, _ int, _ []budget.Limit,
	tracker limitSetter, _ prometheus.Registerer, getenv func(string) string, log *slog.Logger) limitSetter {
	if addr := getenv("TOLLGATE_CLICKHOUSE"); addr != "" {
		log.Warn("analytics not run in -embed: this gateway was built without clickhouse (go build -tags clickhouse); run the analytics service instead", "addr", addr)
	}
	return tracker
}
