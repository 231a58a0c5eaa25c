package budget

import (
	"context"
	"errors"
	"flag"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// group runs background loops; *errgroup.Group is one. Its owner stops
// them by ending the ctx they were started with.
type group interface {
	Go(f func() error)
}

// StartTracker ensures the spend bucket, runs a Tracker of limits on it in
// g until ctx ends, and returns the Tracker once it has loaded every total
// (within 30 s), so no request is admitted against totals not yet read.
// With leases (nil: off) it also ensures the leases bucket and runs the
// Tracker's leases on it (RunLeases; the slices are returned when ctx
// ends), loaded before it returns too.
func StartTracker(ctx context.Context, g group, js jetstream.JetStream, replicas int, limits []Limit, leases *LeaseOptions) (*Tracker, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := EnsureBucket(sctx, js, replicas)
	if err != nil {
		return nil, err
	}
	t := NewTracker(TrackerOptions{Limits: limits, Leases: leases})
	g.Go(func() error { return t.Run(ctx, kv) })
	if leases != nil {
		lkv, err := EnsureLeaseBucket(sctx, js, replicas, leases.TTL)
		if err != nil {
			return nil, err
		}
		g.Go(func() error { return t.RunLeases(ctx, lkv) })
	}
	for _, ready := range []<-chan struct{}{t.Ready(), t.LeasesReady()} {
		select {
		case <-ready:
		case <-sctx.Done():
			return nil, errors.New("budget totals did not load within 30s")
		}
	}
	return t, nil
}

// streamRetry is how long StartConsumer's consumer waits before looking
// again for a usage stream that does not exist yet.
const streamRetry = 2 * time.Second

// RegisterConsumerFlags defines on fs the consumer's flags that are not in the
// config file, stored in o: -webhook (o.WebhookURL), -webhook-format (json
// or slack, default json), -forecast-alerts (default true), -anomaly-factor
// (default 0: off) and -fold-interval (o.FoldInterval, default 200ms, 0:
// none). The budget service and gateway -embed both run their consumer
// with them.
func RegisterConsumerFlags(fs *flag.FlagSet, o *ConsumerOptions) {
	fs.StringVar(&o.WebhookURL, "webhook", "", "URL that receives every budget alert as a JSON POST")
	fs.StringVar(&o.WebhookFormat, "webhook-format", WebhookJSON, "webhook body: json (the alert) or slack (a Slack incoming-webhook message)")
	fs.BoolVar(&o.ForecastAlerts, "forecast-alerts", true, "alert once per limit and period when the spend projected at a day or month limit's end crosses the limit")
	o.FoldInterval = DefaultFoldInterval
	fs.Func("fold-interval", "least time from the start of one fold of usage events into the spend totals to the start of the next: each total is written at most once per interval (0: none) (default 200ms)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		if d <= 0 {
			d = -1 // none: ConsumerOptions' zero value is the default
		}
		o.FoldInterval = d
		return nil
	})
	fs.Float64Var(&o.AnomalyFactor, "anomaly-factor", 0, "alert when a limited scope value's spend in the current hour is over this factor times its hourly rate of the last 7 days (0: off)")
}

// StartConsumer builds the budget consumer of o (NewConsumer) and runs it
// in g until ctx ends. While the usage stream does not exist (the gateways
// create it) the consumer waits for it, looking again every 2 s and
// logging each miss on o.Logger.
func StartConsumer(ctx context.Context, g group, js jetstream.JetStream, o ConsumerOptions) error {
	c, err := NewConsumer(js, o)
	if err != nil {
		return err
	}
	log := c.log
	g.Go(func() error {
		for {
			err := c.Run(ctx)
			if !errors.Is(err, jetstream.ErrStreamNotFound) {
				return err
			}
			log.Warn("usage stream not found; retrying", "stream", c.o.Stream)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(streamRetry):
			}
		}
	})
	return nil
}

// ConsumerFlagSet returns the name of a consumer flag (RegisterConsumerFlags)
// given on fs's command line (the first in name order), or "" when none
// was: for a program that runs a consumer only with some other flag to
// refuse them without it.
func ConsumerFlagSet(fs *flag.FlagSet) string {
	set := ""
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "webhook", "webhook-format", "forecast-alerts", "anomaly-factor", "fold-interval":
			if set == "" {
				set = f.Name
			}
		}
	})
	return set
}
