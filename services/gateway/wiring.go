package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/gateway"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/revoke"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/tollgate/tollgate/pkg/usage"
)

// group runs background loops; *errgroup.Group is one. Its owner stops
// them by ending the ctx they were started with.
type group interface {
	Go(f func() error)
}

// usageConfig is the usage publisher's configuration from the config's
// usage section.
func usageConfig(c config.Usage) usage.Config {
	return usage.Config{
		Buffer: c.Buffer, BatchSize: c.BatchSize, BatchBytes: c.BatchBytes,
		SpoolDir: c.SpoolDir, SpoolMaxBytes: c.SpoolMaxBytes,
		SyncInterval: c.SyncInterval, FailClosed: c.FailClosed, FlushDelay: c.FlushDelay,
		Compression: c.Compression,
	}
}

// startAccounting sets up what bills and limits requests on nc: the usage
// stream, the spend bucket and its in-memory tracker (loaded before it
// returns; it owns the budget reservations, released on the publisher's
// acks) and the usage publisher (the budget consumer of the all-in-one
// mode is started apart, as the budget service starts it: budget.StartConsumer).
// Their loops run in g until ctx ends; close the publisher (Close) before
// ending ctx, so drained requests' events are flushed.
func startAccounting(ctx context.Context, g group, nc *nats.Conn, s *gateway.Settings, log *slog.Logger) (gateway.Accounting, *usage.Publisher, error) {
	cfg := s.Config
	ucfg := usageConfig(cfg.Usage)
	js, err := jetstream.New(nc)
	if err != nil {
		return gateway.Accounting{}, nil, fmt.Errorf("jetstream: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := usage.EnsureStream(sctx, js, usage.StreamConfig{Replicas: cfg.NATS.Replicas, MaxAge: cfg.NATS.MaxAge, DuplicateWindow: cfg.NATS.DuplicateWindow}); err != nil {
		return gateway.Accounting{}, nil, err
	}
	leases, err := budget.LeaseOptionsFrom(cfg.Budget.Leases, log)
	if err != nil {
		return gateway.Accounting{}, nil, err
	}
	tracker, err := budget.StartTracker(ctx, g, js, cfg.NATS.Replicas, s.Limits, leases)
	if err != nil {
		return gateway.Accounting{}, nil, err
	}
	ucfg.OnAck = tracker.OnAck
	pub, err := usage.NewPublisher(js, ucfg, log)
	if err != nil {
		return gateway.Accounting{}, nil, err
	}
	g.Go(func() error { return pub.Run(ctx) })
	presence, err := startPresence(ctx, g, js, cfg, log)
	if err != nil {
		return gateway.Accounting{}, nil, err
	}
	acct := gateway.Accounting{
		Publisher: pub, Journal: pub, Tracker: tracker, Prices: s.Prices,
		Limiter:   ratelimit.New(ratelimit.Options{Share: presence.Share()}),
		Presence:  presence,
		Estimator: tokenize.New(),
	}
	return acct, pub, nil
}

// startPresence announces this gateway for rate limits divided across
// gateways (ratelimit.Announce); nil with rate_limit.local.
func startPresence(ctx context.Context, g group, js jetstream.JetStream, cfg *config.Config, log *slog.Logger) (*ratelimit.Presence, error) {
	if cfg.RateLimit.Local {
		return nil, nil
	}
	return ratelimit.Announce(ctx, g, js, cfg.NATS.Replicas, cfg.RateLimit.PresenceTTL, log)
}

// publishAlerts is an Options.Alert that publishes each alert on nc, and
// logs the ones NATS refuses.
func publishAlerts(nc *nats.Conn, log *slog.Logger) func(subject string, data []byte) {
	return func(subject string, data []byte) {
		if err := nc.Publish(subject, data); err != nil {
			log.Warn("budget alert not published", "subject", subject, "err", err)
		}
	}
}

// newMetrics makes the gateway process's registry: the request metrics,
// and the accounting's (registerAccountingMetrics, the rate limits'
// presence).
func newMetrics(acct gateway.Accounting, pub *usage.Publisher) (*prometheus.Registry, *metrics.Gateway, error) {
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err == nil {
		err = registerAccountingMetrics(reg, pub, acct.Tracker)
	}
	if err == nil {
		err = ratelimit.RegisterMetrics(reg, acct.Presence)
	}
	return reg, m, err
}

// registerAccountingMetrics exports the publisher's counters, the budget
// state and the budget leases' counters at scrape time.
func registerAccountingMetrics(reg prometheus.Registerer, pub *usage.Publisher, tr *budget.Tracker) error {
	err := metrics.RegisterPublisher(reg, func() metrics.PublisherStats {
		st := pub.Stats()
		return metrics.PublisherStats{Queued: st.Queued, Published: st.Published, Spooled: st.Spooled,
			Drained: st.Drained, Failed: st.Failed, Dropped: st.Dropped,
			QueueLen: st.QueueLen, SpoolBytes: st.SpoolBytes,
			BatchesPublished: st.BatchesPublished, BatchesSpooled: st.BatchesSpooled, BatchesDrained: st.BatchesDrained,
			BatchesFailed: st.BatchesFailed, BatchesDropped: st.BatchesDropped, LastSeq: st.LastSeq,
			Recovered: st.Recovered, Begun: st.Begun, BegunDropped: st.BegunDropped}
	})
	if err != nil {
		return err
	}
	if err := budget.RegisterLeaseMetrics(reg, tr); err != nil {
		return err
	}
	return metrics.RegisterBudgets(reg, func() metrics.BudgetStats {
		var bs metrics.BudgetStats
		for _, l := range tr.Report() {
			bs.Utilization = append(bs.Utilization, metrics.BudgetUtilization{Scope: l.Scope, Value: l.Value, Period: l.Period + ":" + l.PeriodStart, Ratio: l.Utilization})
		}
		for sc := range budget.NumScopes {
			s := budget.Scope(sc)
			bs.Reserved = append(bs.Reserved, metrics.BudgetReserved{Scope: s.String(), Value: "*", Nano: tr.Reserved(s)})
		}
		bs.AwaitingAck, bs.UnackedReleased = tr.Awaiting(), tr.Unacked()
		return bs
	})
}

// startAudit ensures the audit stream and returns the recorder of operator
// changes, its failures counted on reg, and the Revoker of POST
// /admin/revoke.
func startAudit(ctx context.Context, js jetstream.JetStream, replicas int, reg prometheus.Registerer) (*audit.Recorder, *revoke.Revoker, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := audit.EnsureStream(sctx, js, replicas); err != nil {
		return nil, nil, err
	}
	rec := audit.NewRecorder(js, audit.Options{Replicas: replicas})
	if err := rec.Register(reg); err != nil {
		return nil, nil, err
	}
	kv, err := revoke.EnsureBucket(sctx, js, replicas)
	if err != nil {
		return nil, nil, err
	}
	return rec, revoke.NewRevoker(kv, rec, time.Now), nil
}

// shutdown is the order a gateway process stops in, after its signal:
// the public server drains its requests (at most Grace), the mock
// upstream and the admin listener stop, the usage publisher flushes every
// drained request's event (at most 15s), then the background work is
// cancelled and awaited, and the tracer flushes its spans.
type shutdown struct {
	Gateway   *gateway.Gateway
	Grace     time.Duration
	Mock      interface{ Shutdown() error }
	Admin     *admin.Server // nil when the admin listener is off
	Publisher *usage.Publisher
	Tracer    *tracing.Tracer // flushed last, at most 5s
	CancelBG  context.CancelFunc
	Wait      func() error // the background group's Wait
	Log       *slog.Logger
}

// Run stops everything in that order.
func (s shutdown) Run() {
	log := s.Log
	log.Info("shutting down", "grace", s.Grace)
	sctx, cancel := context.WithTimeout(context.Background(), s.Grace)
	defer cancel()
	if err := s.Gateway.Shutdown(sctx); err != nil {
		log.Warn("in-flight requests cut at the end of the grace period", "err", err)
	}
	_ = s.Mock.Shutdown()
	if s.Admin != nil {
		actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.Admin.Shutdown(actx)
		acancel()
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer ccancel()
	if err := s.Publisher.Close(cctx); err != nil {
		log.Error("usage publisher close", "err", err)
	}
	st := s.Publisher.Stats()
	log.Info("usage publisher closed", "published", st.Published, "spooled", st.Spooled, "dropped", st.Dropped)
	s.CancelBG()
	if err := s.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("background services", "err", err)
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer tcancel()
	_ = s.Tracer.Shutdown(tctx)
	log.Info("stopped")
}
