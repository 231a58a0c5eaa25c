// Package scaledata loads a synthetic usage history at scale (millions of
// events over 30 days: hundreds of departments, thousands of teams, keys
// and subjects, tens of models) through the usage stream and the analytics
// loader into a ClickHouse 18.16 server of its own, for the scale
// benchmarks of the dashboards (make bench-dashboards) and the console's
// pages. It is for tests only.
package scaledata

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// Cardinalities of the synthetic history: hundreds of departments,
// thousands of teams and keys, tens of models, over 30 days.
const (
	Depts    = 300
	Teams    = 3000 // 10 per department
	Projects = 6000 // 2 per team
	Keys     = 5000
	Subjects = 20000
	Models   = 30
	Days     = 30
	batch    = 1000 // events per stream message, as a busy gateway batches
)

var providers = []string{"openai", "anthropic", "azure", "bedrock", "vertex", "mistral"}

// Load starts a ClickHouse 18.16 server for t and a NATS server,
// publishes n synthetic events from from on, loads them with the analytics
// loader and returns the store and a line saying how long each step took.
func Load(t testing.TB, n int, from time.Time) (*chstore.Store, string) {
	t.Helper()
	return LoadAt(t, chtest.New(t).Addr(), n, from)
}

// LoadAt is Load into the server at addr (database tollgate), which is
// kept between runs: when the database holds n events already (a previous
// run's), it loads nothing, so that a benchmark can be run again on the
// same history without waiting for it.
func LoadAt(t testing.TB, addr string, n int, from time.Time) (*chstore.Store, string) {
	t.Helper()
	ctx := context.Background()
	store, err := chstore.Open(ctx, chstore.Options{Addr: addr, Database: "tollgate", ReadTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var have uint64
	if err := store.Conn().QueryRow(ctx, "SELECT count() FROM usage_events").Scan(&have); err != nil {
		t.Fatal(err)
	}
	if have == uint64(n) {
		return store, fmt.Sprintf("%d events already loaded, ClickHouse %s\n", have, serverVersion(ctx, t, store))
	}
	if have != 0 {
		t.Fatalf("the server at %s holds %d events, not 0 or %d", addr, have, n)
	}
	ns := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}

	// Publish, then load: the two timings apart.
	began := time.Now()
	last := publish(ctx, t, js, n, from)
	published := time.Since(began)
	began = time.Now()
	l, err := chstore.NewLoader(store, js, chstore.LoaderOptions{BatchSize: 100_000, InsertTimeout: 5 * time.Minute,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(lctx) }()
	defer func() { stop(); <-done }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for wm := uint64(0); wm < last; {
		select {
		case err := <-done:
			t.Fatalf("loader stopped: %v", err)
		case <-tick.C:
		}
		if wm, err = store.Watermark(ctx, chstore.DefaultStream, chstore.DefaultDurable); err != nil {
			t.Fatal(err)
		}
	}
	loaded := time.Since(began)
	counts := map[string]uint64{}
	tables := []string{"usage_events", "usage_hourly", "usage_daily", "usage_dept_daily", "usage_team_daily", "usage_key_daily", "usage_traffic_5m",
		"usage_dims", "usage_dept_hourly", "usage_subject_daily", "usage_scope_daily", "usage_overhead_hourly", "usage_ttft_hourly"}
	for _, tbl := range tables {
		var c uint64
		if err := store.Conn().QueryRow(ctx, "SELECT count() FROM "+tbl).Scan(&c); err != nil {
			t.Fatal(err)
		}
		counts[tbl] = c
	}
	if counts["usage_events"] != uint64(n) {
		t.Fatalf("usage_events holds %d rows, want %d", counts["usage_events"], n)
	}
	var rollups []string
	for _, tbl := range tables[1:] {
		rollups = append(rollups, fmt.Sprintf("%s %d", tbl, counts[tbl]))
	}
	return store, fmt.Sprintf("%d events (rows: %s), ClickHouse %s; published in %v, loaded in %v (%.0f events/s)\n",
		counts["usage_events"], strings.Join(rollups, ", "), serverVersion(ctx, t, store), published.Round(time.Millisecond), loaded.Round(time.Millisecond),
		float64(n)/loaded.Seconds())
}

// timePanels runs every panel of every dashboard over [from, to] with
// every variable at All, -scale.runs times, and returns a markdown table of

func serverVersion(ctx context.Context, t testing.TB, s *chstore.Store) string {
	var v string
	if err := s.Conn().QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// publish publishes n events spread evenly over the 30 days from
// from, in batches of batch as one producer, and returns the last
// stream sequence.
func publish(ctx context.Context, t testing.TB, js jetstream.JetStream, n int, from time.Time) uint64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	producer := "scalebench"
	span := int64(Days * 24 * time.Hour)
	models := make([]string, Models)
	for i := range models {
		models[i] = fmt.Sprintf("model-%02d", i)
	}
	var last uint64
	var futures []jetstream.PubAckFuture
	b := &usagev1.UsageBatch{ProducerId: producer}
	flush := func() {
		if len(b.Events) == 0 {
			return
		}
		b.Seq++
		data, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		f, err := js.PublishAsync(usage.BatchSubject(producer), data, jetstream.WithMsgID(usage.BatchMsgID(producer, b.Seq)))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
		b.Events = b.Events[:0]
		if len(futures) >= 256 {
			last = max(last, waitAcks(ctx, t, js, futures))
			futures = futures[:0]
		}
	}
	for i := range n {
		// A key belongs to a team and is shared by Subjects/Keys
		// of its people, as keys are issued; a person stays in one team.
		subject := rng.IntN(Subjects)
		key := subject * Keys / Subjects
		team := key % Teams
		dept := team % Depts
		model := int(rng.ExpFloat64()*5) % Models // a few models carry most traffic
		ts := from.UnixNano() + int64(i)*(span/int64(n))
		status, errType := uint32(200), ""
		if rng.IntN(50) == 0 {
			status, errType = 502, "upstream_error"
		}
		prompt, completion := uint64(50+rng.IntN(4000)), uint64(10+rng.IntN(1000))
		ev := &usagev1.UsageEvent{
			EventId: fmt.Sprintf("%016x-%08x", ts, i), RequestId: fmt.Sprintf("req-%d", i), Timestamp: ts,
			Issuer: "sso", Subject: fmt.Sprintf("user-%05d", subject), KeyId: fmt.Sprintf("key-%04d", key),
			Dept: fmt.Sprintf("dept-%d", dept), Team: fmt.Sprintf("team-%d", team), Project: fmt.Sprintf("proj-%d", team*2+rng.IntN(2)),
			RequestedModel: models[model], ServedModel: models[model], Provider: providers[model%len(providers)],
			Deployment: providers[model%len(providers)] + "/" + models[model], Attempts: 1, Route: models[model],
			PromptTokens: prompt, CompletionTokens: completion, CostNanoUsd: int64(prompt*2500 + completion*10000),
			PricingVersion: "2026-11-01", Endpoint: "/v1/chat/completions", Stream: rng.IntN(2) == 0, StatusCode: status, ErrorType: errType,
			LatencyTotalUs: uint64(200_000 + rng.IntN(5_000_000)), TtftUs: uint64(100_000 + rng.IntN(900_000)), OverheadUs: uint64(100 + rng.IntN(900)),
		}
		if errType != "" {
			ev.CostNanoUsd, ev.Attempts, ev.Fallbacks = 0, 2, []string{"azure/" + models[model]}
		}
		b.Events = append(b.Events, ev)
		if len(b.Events) == batch {
			flush()
		}
	}
	flush()
	return max(last, waitAcks(ctx, t, js, futures))
}

func waitAcks(ctx context.Context, t testing.TB, js jetstream.JetStream, futures []jetstream.PubAckFuture) uint64 {
	t.Helper()
	var last uint64
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			last = max(last, ack.Sequence)
		case err := <-f.Err():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	return last
}
