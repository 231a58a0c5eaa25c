package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// embedEnv is an embedded NATS server with the usage stream and the spend
// buckets, as the gateway's accounting leaves them before startEmbedded.
func embedEnv(ctx context.Context, t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := budget.EnsureBucket(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// alertFlags parses args as the gateway's budget consumer flags.
func alertFlags(t *testing.T, args ...string) budget.ConsumerOptions {
	t.Helper()
	var o budget.ConsumerOptions
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	budget.RegisterConsumerFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

// limitsSeen records the limits handed to it, as the budget tracker takes
// them.
type limitsSeen struct{ sets chan []budget.Limit }

func (l limitsSeen) SetLimits(ls []budget.Limit) { l.sets <- ls }

// TestEmbedRaisesForecastAndAnomalyAlerts: -embed's budget consumer raises
// the budget service's forecast and anomaly alerts. At 12:30 on a day with
// a 10 USD dept limit, 6 USD spent at 12:10 is 0.48 USD an hour since
// midnight, 6 + 0.48 x 11.5 h = 11.52 USD projected at midnight, exhausted
// at 20:50; and the hour's 6 USD is over 2 x the 0.48 USD/h baseline.
func TestEmbedRaisesForecastAndAnomalyAlerts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, js := embedEnv(ctx, t)
	sub, err := nc.SubscribeSync(budget.AlertSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 10, 12, 30, 0, 0, time.UTC)
	copts := alertFlags(t, "-anomaly-factor", "2") // forecast alerts are on by default
	copts.Now = func() time.Time { return now }
	limits := []budget.Limit{{Scope: budget.ScopeDept, Value: "eng", Period: budget.PeriodDay, AmountNano: 10e9}}
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	tracker := limitsSeen{make(chan []budget.Limit, 1)}
	got, err := startEmbedded(embedded{on: true, ctx: gctx, g: g, js: js, replicas: 1, limits: limits, consumer: copts, tracker: tracker,
		reg: prometheus.NewRegistry(), getenv: func(string) string { return "" }, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if got != limitSetter(tracker) {
		t.Errorf("limits go to %T, want the tracker alone without ClickHouse", got)
	}

	data, err := proto.Marshal(&usagev1.UsageEvent{EventId: "e1", Timestamp: now.Add(-20 * time.Minute).UnixNano(), Dept: "eng", CostNanoUsd: 6e9})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "tollgate.usage.eng", data); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]budget.Alert{}
	for len(kinds) < 3 {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("alerts so far %v: %v", kinds, err)
		}
		var a budget.Alert
		if err := json.Unmarshal(m.Data, &a); err != nil {
			t.Fatal(err)
		}
		kinds[a.Kind] = a
	}
	wantForecast := budget.Alert{Kind: budget.AlertForecast, Scope: "dept", Value: "eng", Period: "day", PeriodStart: "2026-12-10",
		LimitNanoUSD: 10e9, SpendNanoUSD: 6e9, RateNanoUSDPerHour: 480_000_000, ProjectedNanoUSD: 11_520_000_000,
		ExhaustsAt: "2026-12-10T20:50:00Z"}
	if a := kinds[budget.AlertForecast]; a != wantForecast {
		t.Errorf("forecast alert\n %+v, want\n %+v", a, wantForecast)
	}
	wantAnomaly := budget.Alert{Kind: budget.AlertAnomaly, Scope: "dept", Value: "eng", Period: "hour", PeriodStart: "2026-12-10T12:00:00Z",
		SpendNanoUSD: 6e9, RateNanoUSDPerHour: 480_000_000, Factor: 2}
	if a := kinds[budget.AlertAnomaly]; a != wantAnomaly {
		t.Errorf("anomaly alert\n %+v, want\n %+v", a, wantAnomaly)
	}
	if a, ok := kinds[budget.AlertThreshold]; !ok || a.Threshold != 0.5 {
		t.Errorf("threshold alert %+v, want the 0.5 one", a)
	}
	stop()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("consumer: %v", err)
	}
}

// TestEmbedOff: without -embed nothing runs here (the budget service
// consumes) and the limits of reloads go to the tracker.
func TestEmbedOff(t *testing.T) {
	var g errgroup.Group
	tracker := limitsSeen{make(chan []budget.Limit, 1)}
	got, err := startEmbedded(embedded{ctx: context.Background(), g: &g, replicas: 1, consumer: alertFlags(t), tracker: tracker,
		reg: prometheus.NewRegistry(), getenv: func(string) string { return "127.0.0.1:9000" }, log: slog.New(slog.DiscardHandler)})
	if err != nil || got != limitSetter(tracker) {
		t.Fatalf("startEmbedded = %T, %v; want the tracker", got, err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
