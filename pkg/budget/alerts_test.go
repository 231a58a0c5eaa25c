package budget

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// alertSink collects the alerts published on NATS and the webhook's bodies.
type alertSink struct {
	e    *env
	sub  *nats.Subscription
	url  string
	mu   sync.Mutex
	hook [][]byte
}

func newAlertSink(t *testing.T, e *env) *alertSink {
	t.Helper()
	sub, err := e.nc.SubscribeSync(AlertSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	s := &alertSink{e: e, sub: sub}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.hook = append(s.hook, b)
		s.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *alertSink) next(t *testing.T) Alert {
	t.Helper()
	m, err := s.sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no alert: %v", err)
	}
	var a Alert
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// none checks that no alert was announced for what was published so far.
// It waits until the consumer has acknowledged every message: the consumer
// publishes a fold's alerts, on the same connection the sink listens on,
// before it acknowledges the fold's messages, so by the time the server
// reports them acknowledged any alert is already in the subscription. No
// wait that a slow machine could outlast.
func (s *alertSink) none(t *testing.T) {
	t.Helper()
	s.e.waitAcked(t, Durable)
	if err := s.e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.sub.Pending(); err != nil || n != 0 {
		m, _ := s.sub.NextMsg(0)
		t.Fatalf("unexpected alert %s (%d pending, err %v)", m.Data, n, err)
	}
}

// webhook waits for n webhook bodies and returns them.
func (s *alertSink) webhook(t *testing.T, n int) [][]byte {
	t.Helper()
	testkit.Wait(t, 5*time.Second, "the condition", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.hook) >= n })
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.hook...)
}

// TestForecastAlert: the week of TestProject in one batch puts dept eng's
// December at 156 USD, 1 USD an hour, so a 600 USD month limit is
// projected at 672 USD on Jan 1 and exhausted on Dec 29: one forecast
// alert, on the threshold subject and webhook, never repeated.
func TestForecastAlert(t *testing.T) {
	e := startEnv(t)
	sink := newAlertSink(t, e)
	opts := ConsumerOptions{
		Limits:         []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, AmountNano: 600 * usd}},
		Thresholds:     []float64{2}, // no threshold alert in this test
		ForecastAlerts: true,
		WebhookURL:     sink.url,
		Now:            fixedClock(utc(2026, 12, 10, 12, 0, 0)),
	}
	stop := run(t, newConsumer(t, e.js, opts))
	e.waitApplied(t, e.publishBatch(t, e.batch("gw1aaaaaaaaaaaaa", 1, weekOfSpend()...), ""))
	want := Alert{Kind: AlertForecast, Scope: "dept", Value: "eng", Period: "month", PeriodStart: "2026-12",
		LimitNanoUSD: 600 * usd, SpendNanoUSD: 156 * usd, RateNanoUSDPerHour: usd, ProjectedNanoUSD: 672 * usd,
		ExhaustsAt: "2026-12-29T00:00:00Z"}
	if got := sink.next(t); got != want {
		t.Fatalf("alert\n %+v, want\n %+v", got, want)
	}
	e.waitApplied(t, e.publishBatch(t, e.batch("gw1aaaaaaaaaaaaa", 2, ev{at: utc(2026, 12, 10, 11, 0, 0), dept: "eng", costNano: usd}), ""))
	sink.none(t)
	_ = stop()
	// A restart announces nothing again: the next fold finds the alert
	// recorded in the bucket, not in memory.
	run(t, newConsumer(t, e.js, opts))
	e.waitApplied(t, e.publishBatch(t, e.batch("gw1aaaaaaaaaaaaa", 3, ev{at: utc(2026, 12, 10, 11, 30, 0), dept: "eng", costNano: usd}), ""))
	sink.none(t)
	var a Alert
	if b := sink.webhook(t, 1); len(b) != 1 || json.Unmarshal(b[0], &a) != nil || a != want {
		t.Errorf("webhook got %q, want the forecast alert", b)
	}
}

// TestAnomalyAlert: against a baseline of the week's day totals at 12:30
// (156 USD over 156.5 h, plus the current hour's spend), 3 USD in the
// hour from noon is not over 3x the baseline (3 x 159/156.5 = 3.048 USD),
// 5 USD is (3 x 161/156.5 = 3.086 USD): one anomaly alert for the hour,
// posted to the webhook in Slack's shape.
func TestAnomalyAlert(t *testing.T) {
	e := startEnv(t)
	sink := newAlertSink(t, e)
	run(t, newConsumer(t, e.js, ConsumerOptions{
		Limits:        []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, AmountNano: 10_000 * usd}},
		AnomalyFactor: 3,
		WebhookURL:    sink.url,
		WebhookFormat: WebhookSlack,
		Now:           fixedClock(utc(2026, 12, 10, 12, 30, 0)),
	}))
	noon := utc(2026, 12, 10, 12, 0, 0)
	history := weekOfSpend() // at 10:00 each day and 09:00 today: no spend in this hour
	seq := uint64(1)
	publish := func(evs ...ev) {
		e.waitApplied(t, e.publishBatch(t, e.batch("gw1aaaaaaaaaaaaa", seq, evs...), ""))
		seq++
	}
	publish(history...)
	sink.none(t)
	publish(ev{at: noon, dept: "eng", costNano: 3 * usd})
	sink.none(t)
	publish(ev{at: noon.Add(time.Minute), dept: "eng", costNano: 2 * usd})
	// 161 USD over the 156.5 h since Dec 4: 1028753993 nano-USD an hour.
	want := Alert{Kind: AlertAnomaly, Scope: "dept", Value: "eng", Period: "hour", PeriodStart: "2026-12-10T12:00:00Z",
		SpendNanoUSD: 5 * usd, RateNanoUSDPerHour: 1_028_753_993, Factor: 3}
	if got := sink.next(t); got != want {
		t.Fatalf("alert\n %+v, want\n %+v", got, want)
	}
	publish(ev{at: noon.Add(2 * time.Minute), dept: "eng", costNano: usd})
	sink.none(t)
	var slack struct{ Text string }
	b := sink.webhook(t, 1)
	if len(b) != 1 || json.Unmarshal(b[0], &slack) != nil ||
		slack.Text != `:rotating_light: Tollgate spend anomaly: dept "eng" spent 5.00 USD in the hour from 2026-12-10T12:00:00Z, over 3 times its baseline of 1.028753993 USD/h` {
		t.Errorf("slack webhook bodies %q", b)
	}
}

func TestSlackText(t *testing.T) {
	tests := []struct {
		name string
		a    Alert
		want string
	}{
		{"threshold", Alert{Kind: AlertThreshold, Scope: "team", Value: "research/ml", Period: "day", PeriodStart: "2026-12-10",
			LimitNanoUSD: 10 * usd, SpendNanoUSD: 8 * usd, Threshold: 0.8},
			`:warning: Tollgate budget alert: team "research/ml" day 2026-12-10 reached 80% of its 10.00 USD limit (spent 8.00 USD)`},
		{"forecast", Alert{Kind: AlertForecast, Scope: "global", Period: "month", PeriodStart: "2026-12",
			LimitNanoUSD: 600 * usd, SpendNanoUSD: 156 * usd, RateNanoUSDPerHour: usd, ProjectedNanoUSD: 672 * usd, ExhaustsAt: "2026-12-29T00:00:00Z"},
			`:chart_with_upwards_trend: Tollgate budget forecast: global "all" month 2026-12 is projected to spend 672.00 USD of its 600.00 USD limit (1.00 USD/h), exhausted at 2026-12-29T00:00:00Z`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.slackText(); got != tt.want {
				t.Errorf("text\n %s\nwant\n %s", got, tt.want)
			}
		})
	}
}

// TestAlertAfterFailedFold: a fold that wrote its totals and failed before
// announcing their alerts is redone, finds every total already applied,
// and still announces the threshold the batch crossed, once.
func TestAlertAfterFailedFold(t *testing.T) {
	e := startEnv(t)
	sink := newAlertSink(t, e)
	now := utc(2026, 12, 10, 12, 0, 0)
	c := newConsumer(t, e.js, ConsumerOptions{
		Limits:     []Limit{{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, AmountNano: 100 * usd}},
		Thresholds: []float64{0.5},
		NakDelay:   50 * time.Millisecond,
		Now:        fixedClock(now),
	})
	var folds atomic.Int32
	c.beforeAlerts = func() error {
		if folds.Add(1) == 1 {
			return errors.New("alert bucket unreachable")
		}
		return nil
	}
	run(t, c)
	e.waitApplied(t, e.publishBatch(t, e.batch("gw1aaaaaaaaaaaaa", 1, ev{at: now, dept: "eng", costNano: 60 * usd}), ""))
	want := Alert{Kind: AlertThreshold, Scope: "dept", Value: "eng", Period: "month", PeriodStart: "2026-12",
		LimitNanoUSD: 100 * usd, SpendNanoUSD: 60 * usd, Threshold: 0.5}
	if got := sink.next(t); got != want {
		t.Fatalf("alert\n %+v, want\n %+v", got, want)
	}
	if n := folds.Load(); n < 2 {
		t.Fatalf("the batch was folded %d times, want the failed fold redone", n)
	}
	if st := e.total(t, TotalID{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, Start: periodStarts(now.UnixNano())[PeriodMonth]}); st == nil || st.CostNanoUsd != 60*usd {
		t.Fatalf("dept total %v, want 60 USD once", st)
	}
	e.waitApplied(t, e.publishBatch(t, e.batch("gw1aaaaaaaaaaaaa", 2, ev{at: now, dept: "eng", costNano: usd}), ""))
	sink.none(t)
}
