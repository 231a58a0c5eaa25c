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

// embedded is what -embed's budget and analytics parts run on: they run
// in g until ctx ends.
type embedded struct {
	on       bool // -embed; without it nothing runs
	ctx      context.Context
	g        *errgroup.Group
	js       jetstream.JetStream
	replicas int
	limits   []budget.Limit         // the config's, at start
	consumer budget.ConsumerOptions // the consumer flags
	tracker  limitSetter
	reg      prometheus.Registerer
	getenv   func(string) string
	log      *slog.Logger
}

// startEmbedded runs what the budget and analytics services run, and
// returns where the limits of every reload go: the tracker, and the
// budget_limits writer when there is one.
//
// The budget consumer of the consumer flags (limits, logger and registry
// are set here) raises threshold, forecast and anomaly alerts as the
// budget service does. The analytics part is startAnalytics: the loaders
// and budget_limits in a build with -tags clickhouse
// (usage_clickhouse.go), a warning in one without (usage_stream.go).
func startEmbedded(e embedded) (limitSetter, error) {
	if !e.on {
		return e.tracker, nil
	}
	copts := e.consumer
	copts.Limits, copts.Logger, copts.Registerer = e.limits, e.log, e.reg
	if err := budget.StartConsumer(e.ctx, e.g, e.js, copts); err != nil {
		return nil, err
	}
	return startAnalytics(e), nil
}

// startEmbedded runs -embed's budget and analytics parts; without -embed
// the limits of every reload go to the tracker alone.
func (a *app) startEmbedded() error {
	var err error
	a.limits, err = startEmbedded(embedded{on: a.s.embed, ctx: a.bg, g: a.g, js: a.js, replicas: a.cfg.NATS.Replicas, limits: a.settings.Limits,
		consumer: a.s.consumer, tracker: a.acct.Tracker, reg: a.reg, getenv: a.s.getenv, log: a.log})
	return err
}
