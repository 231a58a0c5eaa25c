package gateway

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

// UsageConfig is the usage publisher's configuration from the config's
// usage section.
func UsageConfig(c config.Usage) usage.Config {
	return usage.Config{
		Buffer: c.Buffer, BatchSize: c.BatchSize, BatchBytes: c.BatchBytes,
		SpoolDir: c.SpoolDir, SpoolMaxBytes: c.SpoolMaxBytes,
		SyncInterval: c.SyncInterval, FailClosed: c.FailClosed, FlushDelay: c.FlushDelay,
		Compression: c.Compression,
	}
}

// StartAccounting sets up what bills and limits requests on nc: the usage
// stream, the spend bucket and its in-memory tracker (loaded before it
// returns; it owns the budget reservations, released on the publisher's
// acks) and the usage publisher (the budget consumer of the all-in-one
// mode is started apart, as the budget service starts it: budget.StartConsumer).
// Their loops run in g until ctx ends; close the publisher (Close) before
// ending ctx, so drained requests' events are flushed.
func StartAccounting(ctx context.Context, g group, nc *nats.Conn, s *Settings, log *slog.Logger) (Accounting, *usage.Publisher, error) {
	cfg := s.Config
	ucfg := UsageConfig(cfg.Usage)
	js, err := jetstream.New(nc)
	if err != nil {
		return Accounting{}, nil, fmt.Errorf("jetstream: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := usage.EnsureStream(sctx, js, usage.StreamConfig{Replicas: cfg.NATS.Replicas, MaxAge: cfg.NATS.MaxAge, DuplicateWindow: cfg.NATS.DuplicateWindow}); err != nil {
		return Accounting{}, nil, err
	}
	leases, err := budget.LeaseOptionsFrom(cfg.Budget.Leases, log)
	if err != nil {
		return Accounting{}, nil, err
	}
	tracker, err := budget.StartTracker(ctx, g, js, cfg.NATS.Replicas, s.Limits, leases)
	if err != nil {
		return Accounting{}, nil, err
	}
	ucfg.OnAck = tracker.OnAck
	pub, err := usage.NewPublisher(js, ucfg, log)
	if err != nil {
		return Accounting{}, nil, err
	}
	g.Go(func() error { return pub.Run(ctx) })
	presence, err := startPresence(ctx, g, js, cfg, log)
	if err != nil {
		return Accounting{}, nil, err
	}
	acct := Accounting{
		Publisher: pub, Journal: pub, Tracker: tracker, Prices: s.Prices,
		Limiter:   ratelimit.New(ratelimit.Options{Share: presence.Share()}),
		Presence:  presence,
		Estimator: tokenize.New(),
	}
	return acct, pub, nil
}

// startPresence announces this gateway in the rate limit presence bucket
// and runs its renewals in g until ctx ends, so that every gateway divides
// rate limits by the live gateways (docs/budgets.md: rate limits across gateways).
// It returns nil with rate_limit.local.
func startPresence(ctx context.Context, g group, js jetstream.JetStream, cfg *config.Config, log *slog.Logger) (*ratelimit.Presence, error) {
	if cfg.RateLimit.Local {
		return nil, nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := ratelimit.EnsurePresenceBucket(sctx, js, cfg.NATS.Replicas, cfg.RateLimit.PresenceTTL)
	if err != nil {
		return nil, err
	}
	p, err := ratelimit.StartPresence(ctx, kv, ratelimit.PresenceOptions{TTL: cfg.RateLimit.PresenceTTL, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("rate limits divided across gateways", "gateways", p.Share().Gateways(), "id", p.ID())
	g.Go(func() error {
		if err := p.Run(ctx); err != nil {
			// The entry ages out after its TTL instead.
			log.Warn("rate limit presence not withdrawn", "err", err)
		}
		return nil
	})
	return p, nil
}

// PublishAlerts is an Options.Alert that publishes each alert on nc, and
// logs the ones NATS refuses.
func PublishAlerts(nc *nats.Conn, log *slog.Logger) func(subject string, data []byte) {
	return func(subject string, data []byte) {
		if err := nc.Publish(subject, data); err != nil {
			log.Warn("budget alert not published", "subject", subject, "err", err)
		}
	}
}

// NewMetrics makes the gateway process's registry: the request metrics,
// and the accounting's (RegisterAccountingMetrics, the rate limits'
// presence).
func NewMetrics(acct Accounting, pub *usage.Publisher) (*prometheus.Registry, *metrics.Gateway, error) {
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err == nil {
		err = RegisterAccountingMetrics(reg, pub, acct.Tracker)
	}
	if err == nil {
		err = ratelimit.RegisterMetrics(reg, acct.Presence)
	}
	return reg, m, err
}

// RegisterAccountingMetrics exports the publisher's counters, the budget
// state and the budget leases' counters at scrape time.
func RegisterAccountingMetrics(reg prometheus.Registerer, pub *usage.Publisher, tr *budget.Tracker) error {
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

// StartAudit ensures the audit stream and returns the recorder of operator
// changes, its failures counted on reg, and the Revoker of POST
// /admin/revoke.
func StartAudit(ctx context.Context, js jetstream.JetStream, replicas int, reg prometheus.Registerer) (*audit.Recorder, *revoke.Revoker, error) {
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

// Shutdown is the order a gateway process stops in, after its signal:
// the public server drains its requests (at most Grace), the mock
// upstream and the admin listener stop, the usage publisher flushes every
// drained request's event (at most 15s), then the background work is
// cancelled and awaited, and the tracer flushes its spans.
type Shutdown struct {
	Gateway   *Gateway
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
func (s Shutdown) Run() {
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
