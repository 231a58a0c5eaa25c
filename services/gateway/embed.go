package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/budget"
)

// limitSetter takes the budget limits of the config at start and of every
// reload; *budget.Tracker is one.
type limitSetter interface{ SetLimits(limits []budget.Limit) }

// startEmbedded runs, with embed (-embed), what the budget and analytics
// services run, in g until ctx ends; it returns where the limits of every
// reload go: tracker, and the budget_limits writer when there is one.
//
// The budget consumer of copts (the consumer flags; limits, logger and
// registry are set here) raises threshold, forecast and anomaly alerts as
// the budget service does. The analytics part is startAnalytics: the
// loaders and budget_limits in a build with -tags clickhouse
// (usage_clickhouse.go), a warning in one without (usage_stream.go).
func startEmbedded(ctx context.Context, g *errgroup.Group, js jetstream.JetStream, embed bool, replicas int, limits []budget.Limit,
	copts budget.ConsumerOptions, tracker limitSetter, reg prometheus.Registerer, getenv func(string) string, log *slog.Logger) (limitSetter, error) {
	if !embed {
		return tracker, nil
	}
	copts.Limits, copts.Logger, copts.Registerer = limits, log, reg
	if err := budget.StartConsumer(ctx, g, js, copts); err != nil {
		return nil, err
	}
	return startAnalytics(ctx, g, js, replicas, limits, tracker, reg, getenv, log), nil
}
