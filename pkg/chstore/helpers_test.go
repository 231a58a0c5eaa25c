package chstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/natstest"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// ch is the ClickHouse server the package's tests share; each test gets a
// database of its own on it.
var ch chtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := ch.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// newStore opens a Store on a fresh database of the server at addr, migrated,
// and drops the database when the test ends.
func newStore(t testing.TB, addr string) *Store {
	t.Helper()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name := unsafeName.ReplaceAllString(t.Name(), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	db := "t_" + strings.ToLower(name) + "_" + hex.EncodeToString(suffix[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Options{Addr: addr, Database: db})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.conn.Exec(ctx, "DROP DATABASE IF EXISTS `"+db+"`") // a stopped server keeps it; its dir goes anyway
		s.Close()
	})
	return s
}

// newJS starts an embedded NATS server with the usage stream and returns a
// JetStream context on it.
func newJS(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, _ := newJSServer(t)
	return js
}

// newJSServer is newJS that also returns the server (for natstest.Restart).
func newJSServer(t testing.TB) (jetstream.JetStream, *server.Server) {
	t.Helper()
	ns := natstest.Start(t)
	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       DefaultStream,
		Subjects:   []string{"tollgate.usage.>"},
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	return js, ns
}

// baseTS is the timestamp of test event 0: 2026-11-30 23:59:58 UTC, so the
// events straddle a day and a month boundary.
var baseTS = time.Date(2026, 11, 30, 23, 59, 58, 0, time.UTC).UnixNano()

var depts = []string{"eng", "sales", "ops"}

// testEvent returns the deterministic test event number i.
func testEvent(i int) *usagev1.UsageEvent {
	ev := &usagev1.UsageEvent{
		EventId:          fmt.Sprintf("0192c0de-0000-7000-8000-%012d", i),
		RequestId:        fmt.Sprintf("req-%d", i),
		Timestamp:        baseTS + int64(i)*int64(time.Millisecond),
		Issuer:           "dev",
		Subject:          fmt.Sprintf("user-%d", i%7),
		KeyId:            fmt.Sprintf("key-%d", i%5),
		Dept:             depts[i%len(depts)],
		Team:             fmt.Sprintf("team-%d", i%4),
		Project:          fmt.Sprintf("proj-%d", i%3),
		RequestedModel:   "gpt-4o",
		ServedModel:      "gpt-4o-2024-08-06",
		Provider:         "openai",
		Deployment:       "openai/gpt-4o",
		Attempts:         1,
		Route:            "gpt-4o",
		PromptTokens:     uint64(100 + i%50),
		CompletionTokens: uint64(20 + i%30),
		CachedTokens:     uint64(i % 10),
		CostNanoUsd:      1_234_567 + int64(i)*1_000_003,
		PricingVersion:   "2026-11-01",
		Endpoint:         "/v1/chat/completions",
		Stream:           i%2 == 0,
		StatusCode:       200,
		LatencyTotalUs:   uint64(1000 + i),
		TtftUs:           uint64(100 + i),
		UpstreamUs:       uint64(900 + i),
		OverheadUs:       100,
	}
	if i%10 == 9 {
		ev.StatusCode, ev.ErrorType = 502, "upstream_error"
		ev.Attempts, ev.Fallbacks = 3, []string{"openai/gpt-4o", "azure/gpt-4o"}
	}
	return ev
}

// expected sums a range of test events.
type expected struct {
	rows, errors int64
	cost         int64
	prompt       int64
}

func expect(from, to int) expected {
	var e expected
	for i := from; i < to; i++ {
		ev := testEvent(i)
		e.rows++
		e.cost += ev.CostNanoUsd
		e.prompt += int64(ev.PromptTokens)
		if ev.StatusCode >= 400 || ev.ErrorType != "" {
			e.errors++
		}
	}
	return e
}

// publish publishes test events from..to-1 and returns the last one's
// stream sequence.
func publish(t testing.TB, js jetstream.JetStream, from, to int) uint64 {
	t.Helper()
	last, err := publishEvents(js, from, to)
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// publishEvents is publish for goroutines other than the test's.
func publishEvents(js jetstream.JetStream, from, to int) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const window = 1000 // publishes awaiting their ack
	futures := make([]jetstream.PubAckFuture, 0, window)
	var last uint64
	wait := func() error {
		for _, f := range futures {
			select {
			case ack := <-f.Ok():
				last = max(last, ack.Sequence)
			case err := <-f.Err():
				return fmt.Errorf("publish: %w", err)
			case <-ctx.Done():
				return errors.New("publish: no ack")
			}
		}
		futures = futures[:0]
		return nil
	}
	for i := from; i < to; i++ {
		ev := testEvent(i)
		data, err := proto.Marshal(ev)
		if err != nil {
			return 0, fmt.Errorf("marshal: %w", err)
		}
		f, err := js.PublishAsync("tollgate.usage."+ev.Dept, data, jetstream.WithMsgID(ev.EventId))
		if err != nil {
			return 0, fmt.Errorf("publish %d: %w", i, err)
		}
		if futures = append(futures, f); len(futures) == window {
			if err := wait(); err != nil {
				return 0, err
			}
		}
	}
	if err := wait(); err != nil {
		return 0, err
	}
	return last, nil
}

// testOptions are quick loader options for tests.
func testOptions(batch int) LoaderOptions {
	return LoaderOptions{
		BatchSize:     batch,
		BatchInterval: 50 * time.Millisecond,
		MinBackoff:    20 * time.Millisecond,
		MaxBackoff:    200 * time.Millisecond,
		InsertTimeout: 5 * time.Second,
		Logger:        debugLogger,
		Registerer:    prometheus.NewRegistry(),
	}
}

// running is a Loader started in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(run func(context.Context) error) *running {
	ctx, cancel := context.WithCancel(context.Background())
	return startCtx(ctx, cancel, run)
}

// startCtx runs run(ctx) in a goroutine; cancel must cancel ctx.
func startCtx(ctx context.Context, cancel context.CancelFunc, run func(context.Context) error) *running {
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx) }()
	return r
}

// stop cancels the loader and returns Run's result.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("loader did not stop")
		return nil
	}
}

// loadUntil runs a Loader with options o until the stored watermark
// reaches seq, stops it and returns it.
func loadUntil(t testing.TB, s *Store, js jetstream.JetStream, o LoaderOptions, seq uint64) *Loader {
	t.Helper()
	l, err := NewLoader(s, js, o)
	if err != nil {
		t.Fatal(err)
	}
	r := start(l.Run)
	waitWatermark(t, s, seq, r.done)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	return l
}

// waitWatermark waits until the stored watermark reaches seq.
func waitWatermark(t testing.TB, s *Store, seq uint64, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		wm, err := s.Watermark(ctx, DefaultStream, DefaultDurable)
		cancel()
		if err == nil && wm >= seq {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("loader stopped early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("watermark %d (err %v), want %d", wm, err, seq)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// totals are what the tables hold.
type totals struct {
	rows, finalRows, ids                 uint64
	cost, finalCost, hourCost, dayCost   int64
	hourReqs, dayReqs, hourErrs, dayErrs uint64
	prompt                               uint64
	usd                                  string
	// daily holds "requests/cost_nano_usd" of the rollups of
	// countedRollups; traffic, dims and overhead the requests of
	// usage_traffic_5m, usage_dims and usage_overhead_hourly.
	daily                   [len(countedRollups)]string
	traffic, dims, overhead uint64
}

// countedRollups are the rollups (and the rows of one) holding every
// event's request and cost once.
var countedRollups = [...]string{"usage_dept_daily", "usage_team_daily", "usage_key_daily",
	"usage_dept_hourly", "usage_subject_daily", "usage_scope_daily WHERE scope = 'global'", "usage_model_daily"}

func readTotals(t testing.TB, s *Store) totals {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var tt totals
	queries := []struct {
		q    string
		dest []any
	}{
		{"SELECT count(), uniqExact(event_id), sum(cost_nano_usd), sum(prompt_tokens) FROM usage_events",
			[]any{&tt.rows, &tt.ids, &tt.cost, &tt.prompt}},
		{"SELECT count(), sum(cost_nano_usd) FROM usage_events FINAL", []any{&tt.finalRows, &tt.finalCost}},
		{"SELECT sum(requests), sum(errors), sum(cost_nano_usd) FROM usage_hourly", []any{&tt.hourReqs, &tt.hourErrs, &tt.hourCost}},
		{"SELECT sum(requests), sum(errors), sum(cost_nano_usd) FROM usage_daily", []any{&tt.dayReqs, &tt.dayErrs, &tt.dayCost}},
		{"SELECT toString(sum(cost_usd)) FROM spend_daily", []any{&tt.usd}},
		{"SELECT sum(requests) FROM usage_traffic_5m", []any{&tt.traffic}},
		{"SELECT sum(requests) FROM usage_dims", []any{&tt.dims}},
		{"SELECT sum(in_bucket) FROM usage_overhead_hourly", []any{&tt.overhead}},
	}
	for i, tbl := range countedRollups {
		queries = append(queries, struct {
			q    string
			dest []any
		}{"SELECT concat(toString(sum(requests)), '/', toString(sum(cost_nano_usd))) FROM " + tbl, []any{&tt.daily[i]}})
	}
	for _, q := range queries {
		if err := s.conn.QueryRow(ctx, q.q).Scan(q.dest...); err != nil {
			t.Fatalf("%s: %v", q.q, err)
		}
	}
	tt.usd = trimDecimal(tt.usd)
	return tt
}

// checkExact fails t unless the tables hold exactly the events of e, once.
func checkExact(t testing.TB, s *Store, e expected) {
	t.Helper()
	got, want := readTotals(t, s), exactTotals(e)
	if got != want {
		t.Fatalf("tables hold\n %+v\nwant\n %+v", got, want)
	}
}

// exactTotals are the totals of tables holding the events of e, once.
func exactTotals(e expected) totals {
	want := totals{
		rows: uint64(e.rows), finalRows: uint64(e.rows), ids: uint64(e.rows),
		cost: e.cost, finalCost: e.cost, hourCost: e.cost, dayCost: e.cost,
		hourReqs: uint64(e.rows), dayReqs: uint64(e.rows), hourErrs: uint64(e.errors), dayErrs: uint64(e.errors),
		prompt: uint64(e.prompt), usd: usd(e.cost), traffic: uint64(e.rows), dims: uint64(e.rows), overhead: uint64(e.rows),
	}
	for i := range want.daily {
		want.daily[i] = fmt.Sprintf("%d/%d", e.rows, e.cost)
	}
	return want
}

// usd formats non-negative nano-USD as a decimal USD string without
// trailing zeros.
func usd(nano int64) string {
	return trimDecimal(fmt.Sprintf("%d.%09d", nano/1e9, nano%1e9))
}

// trimDecimal drops a decimal's trailing zeros: ClickHouse 18.16 prints
// every digit of the scale, current releases do not.
func trimDecimal(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// errCrash, returned by a test hook, ends Run as a crash would.
var errCrash = errors.New("simulated crash")

// queryStrings returns the first column of q's rows.
func queryStrings(t testing.TB, s *Store, q string, args ...any) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// metricValue returns the value of a counter or gauge.
func metricValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

var debugLogger = slog.New(slog.NewTextHandler(io.Discard, nil))
