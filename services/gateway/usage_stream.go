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

// startAnalytics would run the analytics loaders in -embed mode; this
// gateway was built without the ClickHouse driver, so when
// TOLLGATE_CLICKHOUSE is set it says how to get them.
func startAnalytics(_ context.Context, _ *errgroup.Group, _ jetstream.JetStream, _ int, _ prometheus.Registerer, getenv func(string) string, log *slog.Logger) {
	if addr := getenv("TOLLGATE_CLICKHOUSE"); addr != "" {
		log.Warn("analytics not run in -embed: this gateway was built without clickhouse (go build -tags clickhouse); run the analytics service instead", "addr", addr)
	}
}
