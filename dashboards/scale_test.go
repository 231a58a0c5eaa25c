//go:build chscale

package dashboards

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
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

// The scale benchmark (make bench-dashboards): not part of make test.
var (
	scaleEvents = flag.Int("scale.events", 1_000_000, "synthetic usage events to load")
	scaleRuns   = flag.Int("scale.runs", 3, "timed runs of each panel (the median is reported)")
	scaleOut    = flag.String("scale.out", "", "also write the timings table (markdown) to this file")
)

// Cardinalities of the synthetic history: hundreds of departments,
// thousands of teams and keys, tens of models, over 30 days.
const (
	scaleDepts    = 300
	scaleTeams    = 3000 // 10 per department
	scaleProjects = 6000 // 2 per team
	scaleKeys     = 5000
	scaleSubjects = 20000
	scaleModels   = 30
	scaleDays     = 30
	scaleBatch    = 1000 // events per stream message, as a busy gateway batches
)

var scaleProviders = []string{"openai", "anthropic", "azure", "bedrock", "vertex", "mistral"}

// TestScale loads -scale.events synthetic events through the usage stream
// and the analytics loader into ClickHouse 18.16 (a server of its own),
// then times every panel of every dashboard over the 30 days with every
// variable at All, as Grafana sends them. It asserts nothing about time:
// it reports.
func TestScale(t *testing.T) {
	end := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	from := end.Add(-scaleDays * 24 * time.Hour)
	store, summary := loadSynthetic(t, *scaleEvents, from)
	ctx := context.Background()
	if _, err := store.WriteLimits(ctx, []chstore.Limit{
		{Scope: "dept", Value: "*", Period: "month", AmountNano: 50_000e9},
		{Scope: "dept", Value: "dept-7", Period: "month", AmountNano: 100e9},
		{Scope: "team", Value: "*", Period: "day", AmountNano: 500e9},
		{Scope: "key", Value: "*", Period: "total", AmountNano: 1000e9},
		{Scope: "subject", Value: "*", Period: "month", AmountNano: 200e9},
		{Scope: "global", Period: "month", AmountNano: 10_000_000e9},
	}, end); err != nil {
		t.Fatal(err)
	}
	out := summary + "\n" + timePanels(t, store, from, end)
	t.Log("\n" + out)
	if *scaleOut != "" {
		if err := os.WriteFile(*scaleOut, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// loadSynthetic starts a ClickHouse 18.16 server and a NATS server,
// publishes n synthetic events from from on, loads them with the analytics
// loader and returns the store and a line saying how long each step took.
func loadSynthetic(t *testing.T, n int, from time.Time) (*chstore.Store, string) {
	t.Helper()
	srv := chtest.New(t)
	ctx := context.Background()
	store, err := chstore.Open(ctx, chstore.Options{Addr: srv.Addr(), Database: "tollgate", ReadTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
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
	last := publishSynthetic(ctx, t, js, n, from)
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
// the first and the median time.
func timePanels(t *testing.T, store *chstore.Store, from, to time.Time) string {
	t.Helper()
	ctx := context.Background()
	var out strings.Builder
	fmt.Fprintf(&out, "| dashboard | panel | rows returned | first run | median of %d |\n|---|---|---:|---:|---:|\n", *scaleRuns)
	dashes := loadDashboards(t)
	for _, f := range slices.Sorted(maps.Keys(dashes)) {
		d := dashes[f]
		e := &expander{from: from, to: to, interval: 3600, vars: map[string][]string{}}
		resolveVars(ctx, t, store.Conn(), d, e, nil)
		for _, p := range flatPanels(d.Panels) {
			for _, tg := range p.Targets {
				sql, err := e.expand(tg.RawSQL)
				if err != nil {
					t.Fatal(err)
				}
				var times []time.Duration
				var got int
				for range max(*scaleRuns, 1) {
					start := time.Now()
					rs, err := query(ctx, store.Conn(), sql)
					if err != nil {
						t.Fatalf("%s: %v", p.Title, err)
					}
					times = append(times, time.Since(start))
					got = len(rs)
				}
				first := times[0]
				slices.Sort(times)
				fmt.Fprintf(&out, "| %s | %s | %d | %v | %v |\n", strings.TrimSuffix(f, ".json"), p.Title, got,
					first.Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond))
			}
		}
	}
	return out.String()
}

func serverVersion(ctx context.Context, t *testing.T, s *chstore.Store) string {
	var v string
	if err := s.Conn().QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// publishSynthetic publishes n events spread evenly over the 30 days from
// from, in batches of scaleBatch as one producer, and returns the last
// stream sequence.
func publishSynthetic(ctx context.Context, t *testing.T, js jetstream.JetStream, n int, from time.Time) uint64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	producer := "scalebench"
	span := int64(scaleDays * 24 * time.Hour)
	models := make([]string, scaleModels)
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
		// A key belongs to a team and is shared by scaleSubjects/scaleKeys
		// of its people, as keys are issued; a person stays in one team.
		subject := rng.IntN(scaleSubjects)
		key := subject * scaleKeys / scaleSubjects
		team := key % scaleTeams
		dept := team % scaleDepts
		model := int(rng.ExpFloat64()*5) % scaleModels // a few models carry most traffic
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
			RequestedModel: models[model], ServedModel: models[model], Provider: scaleProviders[model%len(scaleProviders)],
			Deployment: scaleProviders[model%len(scaleProviders)] + "/" + models[model], Attempts: 1, Route: models[model],
			PromptTokens: prompt, CompletionTokens: completion, CostNanoUsd: int64(prompt*2500 + completion*10000),
			PricingVersion: "2026-11-01", Endpoint: "/v1/chat/completions", Stream: rng.IntN(2) == 0, StatusCode: status, ErrorType: errType,
			LatencyTotalUs: uint64(200_000 + rng.IntN(5_000_000)), TtftUs: uint64(100_000 + rng.IntN(900_000)), OverheadUs: uint64(100 + rng.IntN(900)),
		}
		if errType != "" {
			ev.CostNanoUsd, ev.Attempts, ev.Fallbacks = 0, 2, []string{"azure/" + models[model]}
		}
		b.Events = append(b.Events, ev)
		if len(b.Events) == scaleBatch {
			flush()
		}
	}
	flush()
	return max(last, waitAcks(ctx, t, js, futures))
}

func waitAcks(ctx context.Context, t *testing.T, js jetstream.JetStream, futures []jetstream.PubAckFuture) uint64 {
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
