//go:build clickhouse

package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chtest"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestEmbedRunsAnalytics: with TOLLGATE_CLICKHOUSE set, -embed does what
// the analytics service does: it loads the usage stream into ClickHouse,
// writes the enforced limits to budget_limits at start and those of a
// reload (after the tracker has them), and stops with its context.
func TestEmbedRunsAnalytics(t *testing.T) {
	chAddr := chtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := embedEnv(ctx, t)
	env := map[string]string{"TOLLGATE_CLICKHOUSE": chAddr, "TOLLGATE_CLICKHOUSE_DB": "embed"}
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	start := []budget.Limit{{Scope: budget.ScopeDept, Value: "eng", Period: budget.PeriodMonth, AmountNano: 10e9}}
	tracker := limitsSeen{make(chan []budget.Limit, 1)}
	limits, err := startEmbedded(embedded{on: true, ctx: gctx, g: g, js: js, replicas: 1, limits: start, consumer: alertFlags(t), tracker: tracker,
		reg: prometheus.NewRegistry(), getenv: func(k string) string { return env[k] }, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}

	data, err := proto.Marshal(&usagev1.UsageEvent{EventId: "e1", Timestamp: time.Now().UnixNano(), Dept: "eng", CostNanoUsd: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "tollgate.usage.eng", data); err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{chAddr}, Auth: clickhouse.Auth{Database: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitQuery(ctx, t, conn, "SELECT toString(sum(cost_nano_usd)) FROM embed.usage_events", "7")
	const current = "SELECT arrayStringConcat(groupArray(concat(scope, ' ', value, ' ', period, ' ', toString(amount_nano_usd))), ',') " +
		"FROM (SELECT * FROM embed.budget_limits_current ORDER BY scope, value, period)"
	waitQuery(ctx, t, conn, current, "dept eng month 10000000000")

	reloaded := []budget.Limit{{Scope: budget.ScopeDept, Value: "eng", Period: budget.PeriodMonth, AmountNano: 12e9},
		{Scope: budget.ScopeKey, Value: "k1", Period: budget.PeriodDay, AmountNano: 1e9}}
	limits.SetLimits(reloaded)
	if got := <-tracker.sets; len(got) != 2 {
		t.Errorf("tracker got %v, want the reloaded limits", got)
	}
	waitQuery(ctx, t, conn, current, "dept eng month 12000000000,key k1 day 1000000000")
	stop()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("loaders: %v", err)
	}
}

// waitQuery waits until q's single String result is want.
func waitQuery(ctx context.Context, t *testing.T, conn clickhouse.Conn, q, want string) {
	t.Helper()
	for {
		var got string
		err := conn.QueryRow(ctx, q).Scan(&got)
		if err == nil && got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %q (%v), want %q", q, got, err, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestEmbedWithoutClickHouse: no address, no loaders, and the limits of
// reloads go to the tracker alone.
func TestEmbedWithoutClickHouse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := embedEnv(ctx, t)
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	tracker := limitsSeen{make(chan []budget.Limit, 1)}
	got, err := startEmbedded(embedded{on: true, ctx: gctx, g: g, js: js, replicas: 1, consumer: alertFlags(t), tracker: tracker,
		reg: prometheus.NewRegistry(), getenv: func(string) string { return "" }, log: slog.New(slog.DiscardHandler)})
	if err != nil || got != limitSetter(tracker) {
		t.Fatalf("startEmbedded = %T, %v; want the tracker", got, err)
	}
	stop()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
