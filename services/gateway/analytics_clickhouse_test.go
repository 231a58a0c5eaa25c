//go:build clickhouse

package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestEmbedRunsAnalytics: with TOLLGATE_CLICKHOUSE set, -embed loads the
// usage stream into ClickHouse as the analytics service does, and stops
// with its context.
func TestEmbedRunsAnalytics(t *testing.T) {
	chAddr := chtest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOLLGATE_CLICKHOUSE": chAddr, "TOLLGATE_CLICKHOUSE_DB": "embed"}
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	startAnalytics(gctx, g, js, 1, prometheus.NewRegistry(), func(k string) string { return env[k] }, slog.New(slog.DiscardHandler))

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
	for {
		var cost int64
		err := conn.QueryRow(ctx, "SELECT sum(cost_nano_usd) FROM embed.usage_events").Scan(&cost)
		if err == nil && cost == 7 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("event not loaded: cost %d, %v", cost, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("loaders: %v", err)
	}
}

// TestEmbedWithoutClickHouse: no address, no loaders.
func TestEmbedWithoutClickHouse(t *testing.T) {
	var g errgroup.Group
	startAnalytics(context.Background(), &g, nil, 1, prometheus.NewRegistry(), func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
