//go:build !clickhouse

package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/billing"
	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/usage"
)

// usageExplainer answers GET /admin/usage/{request_id} by scanning the last
// 24 hours of the usage stream. Reading ClickHouse instead
// (TOLLGATE_CLICKHOUSE) needs a gateway built with -tags clickhouse; this
// one says so when the variable is set. The returned func closes nothing.
func usageExplainer(_ context.Context, js jetstream.JetStream, getenv func(string) string, log *slog.Logger) (*billing.Explainer, func()) {
	if addr := getenv("TOLLGATE_CLICKHOUSE"); addr != "" {
		log.Warn("usage lookups read the stream: this gateway was built without clickhouse lookups (go build -tags clickhouse)", "addr", addr)
	}
	return &billing.Explainer{Stream: usage.StreamName, Window: billing.DefaultStreamWindow, JS: js}, func() {}
}

// startAnalytics says, when TOLLGATE_CLICKHOUSE is set, that this
// gateway was built without the ClickHouse driver, so -embed does not run
// the analytics service's part (the loaders, budget_limits). The limits of
// every reload go to tracker alone.
func startAnalytics(e embedded) limitSetter {
	if addr := e.getenv("TOLLGATE_CLICKHOUSE"); addr != "" {
		e.log.Warn("analytics not run in -embed: this gateway was built without clickhouse (go build -tags clickhouse); run the analytics service instead", "addr", addr)
	}
	return e.tracker
}

// historyConn is nil: this gateway reads no ClickHouse, and the console's
// history pages say so.
func historyConn(*billing.Explainer) chsql.Querier { return nil }
