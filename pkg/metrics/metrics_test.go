package metrics

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// series finds the metric name{labels} in reg, or nil. labels must list
// every label of the series.
func series(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// value returns the value of a counter or gauge series, failing the test
// when it is missing.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := series(t, reg, name, labels)
	switch {
	case m == nil:
		t.Fatalf("no series %s%v", name, labels)
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

// histogram returns the sample count and sum of a histogram series, or 0, 0
// when the series does not exist.
func histogram(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	m := series(t, reg, name, labels)
	if m == nil {
		return 0, 0
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// count returns how many series of name reg holds.
func count(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func newGateway(t *testing.T, o Options) (*Gateway, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	g, err := New(reg, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return g, reg
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

type observation struct {
	status                 int
	total, upstream, ttft  time.Duration
	stream                 bool
	model, provider, endpt string
}

func TestRouteObserve(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		obs  []observation
		// requests by status label for route m/p/e
		requests map[string]float64
		// duration, upstream, overhead and ttft sample counts and sums (s)
		durN, upN, ovN, ttftN       uint64
		durSum, upSum, ovSum, ttSum float64
		aborts                      float64
	}{
		{
			name:     "one non-stream success",
			obs:      []observation{{status: 200, total: 120 * ms, upstream: 119 * ms}},
			requests: map[string]float64{"200": 1},
			durN:     1, durSum: 0.120, upN: 1, upSum: 0.119, ovN: 1, ovSum: 0.001,
		},
		{
			name: "stream records ttft, non-stream does not",
			obs: []observation{
				{status: 200, total: 2 * time.Second, upstream: 1990 * ms, ttft: 300 * ms, stream: true},
				{status: 200, total: time.Second, upstream: 999 * ms, ttft: 500 * ms},
			},
			requests: map[string]float64{"200": 2},
			durN:     2, durSum: 3, upN: 2, upSum: 2.989, ovN: 2, ovSum: 0.011, ttftN: 1, ttSum: 0.3,
		},
		{
			name: "refused before upstream skips upstream and overhead",
			obs: []observation{
				{status: 401, total: 50 * time.Microsecond},
				{status: 429, total: 80 * time.Microsecond},
				{status: 429, total: 20 * time.Microsecond},
			},
			requests: map[string]float64{"401": 1, "429": 2},
			durN:     3, durSum: 150e-6,
		},
		{
			name: "client abort counts 499 and an abort",
			obs: []observation{
				{status: 499, total: 400 * ms, upstream: 399 * ms, ttft: 100 * ms, stream: true},
			},
			requests: map[string]float64{"499": 1},
			durN:     1, durSum: 0.4, upN: 1, upSum: 0.399, ovN: 1, ovSum: 0.001, ttftN: 1, ttSum: 0.1,
			aborts: 1,
		},
		{
			name: "rare statuses get their own series",
			obs: []observation{
				{status: 418, total: ms},
				{status: 418, total: ms},
				{status: 507, total: ms, upstream: ms},
			},
			requests: map[string]float64{"418": 2, "507": 1},
			durN:     3, durSum: 0.003, upN: 1, upSum: 0.001, ovN: 1,
		},
		{
			name:     "upstream longer than total counts zero overhead",
			obs:      []observation{{status: 200, total: 10 * ms, upstream: 11 * ms}},
			requests: map[string]float64{"200": 1},
			durN:     1, durSum: 0.01, upN: 1, upSum: 0.011, ovN: 1, ovSum: 0,
		},
		{
			name: "other routes do not leak into this one",
			obs: []observation{
				{status: 200, total: ms, model: "other-model", provider: "p", endpt: "e"},
				{status: 200, total: ms, model: "m", provider: "p", endpt: "other-endpoint"},
				{status: 500, total: 2 * ms, upstream: ms},
			},
			requests: map[string]float64{"500": 1},
			durN:     1, durSum: 0.002, upN: 1, upSum: 0.001, ovN: 1, ovSum: 0.001,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, reg := newGateway(t, Options{})
			for _, o := range tt.obs {
				m, p, e := "m", "p", "e"
				if o.model != "" {
					m, p, e = o.model, o.provider, o.endpt
				}
				g.Route(m, p, e).Observe(o.status, o.total, o.upstream, o.ttft, o.stream)
			}
			route := map[string]string{"model": "m", "provider": "p", "endpoint": "e"}
			for status, want := range tt.requests {
				l := map[string]string{"model": "m", "provider": "p", "endpoint": "e", "status": status}
				if got := value(t, reg, "tollgate_requests_total", l); got != want {
					t.Errorf("requests_total{status=%s} = %v, want %v", status, got, want)
				}
			}
			var perRoute int
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() != "tollgate_requests_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					l := labelsOf(m)
					if l["model"] == "m" && l["provider"] == "p" && l["endpoint"] == "e" {
						perRoute++
					}
				}
			}
			if perRoute != len(tt.requests) {
				t.Errorf("route has %d status series, want %d", perRoute, len(tt.requests))
			}
			for _, h := range []struct {
				name  string
				wantN uint64
				sum   float64
			}{
				{"tollgate_request_duration_seconds", tt.durN, tt.durSum},
				{"tollgate_upstream_duration_seconds", tt.upN, tt.upSum},
				{"tollgate_overhead_seconds", tt.ovN, tt.ovSum},
				{"tollgate_ttft_seconds", tt.ttftN, tt.ttSum},
			} {
				n, sum := histogram(t, reg, h.name, route)
				if n != h.wantN || (h.sum != 0 && !near(sum, h.sum)) {
					t.Errorf("%s: count %d sum %v, want %d and %v", h.name, n, sum, h.wantN, h.sum)
				}
			}
			if got := value(t, reg, "tollgate_client_aborts_total", map[string]string{"model": "m"}); got != tt.aborts {
				t.Errorf("client_aborts_total = %v, want %v", got, tt.aborts)
			}
		})
	}
}

func TestOverheadBuckets(t *testing.T) {
	g, reg := newGateway(t, Options{})
	r := g.Route("m", "p", "e")
	// 40 us, 300 us and 3 ms of overhead land in distinct buckets.
	for _, ov := range []time.Duration{40 * time.Microsecond, 300 * time.Microsecond, 3 * time.Millisecond} {
		r.Observe(200, time.Second+ov, time.Second, 0, false)
	}
	m := series(t, reg, "tollgate_overhead_seconds", map[string]string{"model": "m", "provider": "p", "endpoint": "e"})
	want := map[float64]uint64{25e-6: 0, 50e-6: 1, 250e-6: 1, 500e-6: 2, 0.0025: 2, 0.005: 3}
	for _, b := range m.GetHistogram().GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
}

func TestRouteIsCached(t *testing.T) {
	g, _ := newGateway(t, Options{})
	a := g.Route("m", "p", "e")
	if b := g.Route("m", "p", "e"); a != b {
		t.Error("Route returned a new *Route for the same labels")
	}
	if c := g.Route("m", "p", "e2"); a == c {
		t.Error("Route returned the same *Route for another endpoint")
	}
}

func TestRouteUnpriced(t *testing.T) {
	g, reg := newGateway(t, Options{})
	g.Route("local-llama", "vllm", "chat").Unpriced()
	g.Route("local-llama", "vllm", "completions").Unpriced()
	if got := value(t, reg, "tollgate_unpriced_requests_total", map[string]string{"model": "local-llama"}); got != 2 {
		t.Errorf("unpriced_requests_total = %v, want 2", got)
	}
}

func TestTokens(t *testing.T) {
	type call struct {
		dept, model                           string
		prompt, completion, cached, reasoning uint64
		cost                                  int64
	}
	type want struct {
		dept, model, direction string
		n                      float64
	}
	type wantCost struct {
		dept, model string
		nano        float64
	}
	tests := []struct {
		name     string
		maxDepts int
		calls    []call
		tokens   []want
		cost     []wantCost
		absent   []string // depts with no series
	}{
		{
			name: "sums per dept and model",
			calls: []call{
				{"eng", "gpt", 100, 20, 0, 0, 1500},
				{"eng", "gpt", 50, 10, 30, 5, 800},
				{"eng", "claude", 7, 3, 0, 0, 90},
				{"fin", "gpt", 1, 1, 0, 0, 2},
			},
			tokens: []want{
				{"eng", "gpt", "prompt", 150}, {"eng", "gpt", "completion", 30},
				{"eng", "gpt", "cached", 30}, {"eng", "gpt", "reasoning", 5},
				{"eng", "claude", "prompt", 7}, {"eng", "claude", "completion", 3},
				{"fin", "gpt", "prompt", 1}, {"fin", "gpt", "completion", 1},
			},
			cost: []wantCost{{"eng", "gpt", 2300}, {"eng", "claude", 90}, {"fin", "gpt", 2}},
		},
		{
			name:   "negative and zero cost add nothing",
			calls:  []call{{"eng", "gpt", 1, 0, 0, 0, -5}, {"eng", "gpt", 0, 0, 0, 0, 0}},
			tokens: []want{{"eng", "gpt", "prompt", 1}, {"eng", "gpt", "completion", 0}},
			cost:   []wantCost{{"eng", "gpt", 0}},
		},
		{
			name:  "large costs stay exact",
			calls: []call{{"eng", "gpt", 0, 0, 0, 0, 1 << 52}, {"eng", "gpt", 0, 0, 0, 0, 3}},
			cost:  []wantCost{{"eng", "gpt", 1<<52 + 3}},
		},
		{
			name:     "depts past the cap count as other",
			maxDepts: 2,
			calls: []call{
				{"a", "gpt", 1, 0, 0, 0, 10},
				{"b", "gpt", 2, 0, 0, 0, 20},
				{"c", "gpt", 4, 0, 0, 0, 40},
				{"d", "gpt", 8, 0, 0, 0, 80},
				{"a", "claude", 16, 0, 0, 0, 160}, // an admitted dept keeps its name for new models
				{"c", "gpt", 32, 0, 0, 0, 320},
			},
			tokens: []want{
				{"a", "gpt", "prompt", 1}, {"b", "gpt", "prompt", 2},
				{"other", "gpt", "prompt", 44}, {"a", "claude", "prompt", 16},
			},
			cost:   []wantCost{{"a", "gpt", 10}, {"b", "gpt", 20}, {"other", "gpt", 440}, {"a", "claude", 160}},
			absent: []string{"c", "d"},
		},
		{
			name:   "empty dept is a dept",
			calls:  []call{{"", "gpt", 5, 0, 0, 0, 1}},
			tokens: []want{{"", "gpt", "prompt", 5}},
			cost:   []wantCost{{"", "gpt", 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, reg := newGateway(t, Options{MaxDepts: tt.maxDepts})
			for _, c := range tt.calls {
				g.Tokens(c.dept, c.model, c.prompt, c.completion, c.cached, c.reasoning, c.cost)
			}
			for _, w := range tt.tokens {
				l := map[string]string{"dept": w.dept, "model": w.model, "direction": w.direction}
				if got := value(t, reg, "tollgate_tokens_total", l); got != w.n {
					t.Errorf("tokens_total%v = %v, want %v", l, got, w.n)
				}
			}
			for _, w := range tt.cost {
				l := map[string]string{"dept": w.dept, "model": w.model}
				if got := value(t, reg, "tollgate_cost_nano_usd_total", l); got != w.nano {
					t.Errorf("cost_nano_usd_total%v = %v, want %v", l, got, w.nano)
				}
			}
			for _, d := range tt.absent {
				if m := series(t, reg, "tollgate_cost_nano_usd_total", map[string]string{"dept": d, "model": "gpt"}); m != nil {
					t.Errorf("dept %q has a series past the cap", d)
				}
			}
		})
	}
}

func TestDeptCapBoundsSeries(t *testing.T) {
	g, reg := newGateway(t, Options{MaxDepts: 10})
	for i := range 500 {
		g.Tokens(fmt.Sprintf("dept-%d", i), "gpt", 1, 1, 0, 0, 1)
	}
	if n := count(t, reg, "tollgate_cost_nano_usd_total"); n != 11 {
		t.Errorf("%d cost series, want 10 depts + other", n)
	}
	if got := value(t, reg, "tollgate_tokens_total", map[string]string{"dept": "other", "model": "gpt", "direction": "prompt"}); got != 490 {
		t.Errorf("other prompt tokens = %v, want 490", got)
	}
	var cached int
	for i := range g.shards {
		cached += len(g.shards[i].m)
	}
	if cached != 11 {
		t.Errorf("cache holds %d entries, want 11", cached)
	}
}

func TestRoutingMetrics(t *testing.T) {
	g, reg := newGateway(t, Options{})
	g.Fallback("gpt-4o", "openai/gpt-4o", "azure/gpt-4o")
	g.Fallback("gpt-4o", "openai/gpt-4o", "azure/gpt-4o")
	g.Retry("openai")
	g.Hedge("gpt-4o", HedgeStarted)
	g.Hedge("gpt-4o", HedgeStarted)
	g.Hedge("gpt-4o", HedgeWon)
	g.Hedge("gpt-4o", HedgeCancelled)
	g.Hedge("gpt-4o", HedgeCancelled)
	g.SetCircuit("openai/gpt-4o", CircuitOpen)
	g.SetCircuit("azure/gpt-4o", CircuitHalfOpen)
	g.SetCircuit("azure/gpt-4o", CircuitClosed)
	g.RevocationPropagated(150 * time.Millisecond)
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"fallbacks", "tollgate_fallbacks_total", map[string]string{"model": "gpt-4o", "from": "openai/gpt-4o", "to": "azure/gpt-4o"}, 2},
		{"retries", "tollgate_retries_total", map[string]string{"provider": "openai"}, 1},
		{"hedges started", "tollgate_hedges_total", map[string]string{"model": "gpt-4o", "event": "started"}, 2},
		{"hedges won", "tollgate_hedges_total", map[string]string{"model": "gpt-4o", "event": "won"}, 1},
		{"losers cancelled", "tollgate_hedges_total", map[string]string{"model": "gpt-4o", "event": "cancelled"}, 2},
		{"open circuit", "tollgate_circuit_state", map[string]string{"target": "openai/gpt-4o"}, 2},
		{"closed again", "tollgate_circuit_state", map[string]string{"target": "azure/gpt-4o"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := value(t, reg, tt.metric, tt.labels); got != tt.want {
				t.Errorf("%s = %v, want %v", tt.metric, got, tt.want)
			}
		})
	}
	t.Run("revocation", func(t *testing.T) {
		if n, sum := histogram(t, reg, "tollgate_revocation_propagation_seconds", map[string]string{}); n != 1 || !near(sum, 0.15) {
			t.Errorf("revocation histogram: count %d sum %v, want 1 and 0.15", n, sum)
		}
	})
}

func TestPublisherCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	st := PublisherStats{Queued: 10, Published: 6, Spooled: 3, Drained: 1, Failed: 2, Dropped: 1, QueueLen: 4, SpoolBytes: 2048,
		BatchesPublished: 3, BatchesSpooled: 2, BatchesDrained: 1, BatchesFailed: 1, BatchesDropped: 1, LastSeq: 6}
	if err := RegisterPublisher(reg, func() PublisherStats { mu.Lock(); defer mu.Unlock(); return st }); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, want PublisherStats) {
		t.Helper()
		for state, n := range map[string]int64{"queued": want.Queued, "published": want.Published, "spooled": want.Spooled,
			"drained": want.Drained, "failed": want.Failed, "dropped": want.Dropped} {
			if got := value(t, reg, "tollgate_usage_events_total", map[string]string{"state": state}); got != float64(n) {
				t.Errorf("usage_events_total{state=%s} = %v, want %d", state, got, n)
			}
		}
		if got := value(t, reg, "tollgate_usage_queue_length", map[string]string{}); got != float64(want.QueueLen) {
			t.Errorf("usage_queue_length = %v, want %d", got, want.QueueLen)
		}
		if got := value(t, reg, "tollgate_usage_spool_bytes", map[string]string{}); got != float64(want.SpoolBytes) {
			t.Errorf("usage_spool_bytes = %v, want %d", got, want.SpoolBytes)
		}
		for state, n := range map[string]int64{"published": want.BatchesPublished, "spooled": want.BatchesSpooled,
			"drained": want.BatchesDrained, "failed": want.BatchesFailed, "dropped": want.BatchesDropped} {
			if got := value(t, reg, "tollgate_usage_batches_total", map[string]string{"state": state}); got != float64(n) {
				t.Errorf("usage_batches_total{state=%s} = %v, want %d", state, got, n)
			}
		}
		if got := value(t, reg, "tollgate_usage_batch_seq", map[string]string{}); got != float64(want.LastSeq) {
			t.Errorf("usage_batch_seq = %v, want %d", got, want.LastSeq)
		}
	}
	t.Run("first scrape", func(t *testing.T) { check(t, st) })
	t.Run("read again at each scrape", func(t *testing.T) {
		mu.Lock()
		st.Queued, st.Published, st.QueueLen, st.SpoolBytes = 20, 16, 0, 0
		st.BatchesPublished, st.LastSeq = 5, 8
		want := st
		mu.Unlock()
		check(t, want)
	})
	t.Run("registering twice fails", func(t *testing.T) {
		if err := RegisterPublisher(reg, func() PublisherStats { return PublisherStats{} }); err == nil {
			t.Error("second RegisterPublisher on one registry succeeded")
		}
	})
}

func TestBudgetCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	stats := BudgetStats{
		Utilization: []BudgetUtilization{
			{Scope: "dept", Value: "eng", Period: "month", Ratio: 0.25},
			{Scope: "global", Value: "", Period: "day", Ratio: 1.5},
		},
		Reserved:    []BudgetReserved{{Scope: "dept", Value: "*", Nano: 1234}},
		AwaitingAck: 7, UnackedReleased: 3,
	}
	if err := RegisterBudgets(reg, func() BudgetStats { return stats }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"dept month", "tollgate_budget_utilization_ratio", map[string]string{"scope": "dept", "value": "eng", "period": "month"}, 0.25},
		{"global over", "tollgate_budget_utilization_ratio", map[string]string{"scope": "global", "value": "", "period": "day"}, 1.5},
		{"reserved", "tollgate_budget_reserved_nano_usd", map[string]string{"scope": "dept", "value": "*"}, 1234},
		{"awaiting ack", "tollgate_budget_reservations_awaiting_ack", nil, 7},
		{"released unacked", "tollgate_budget_reservations_unacked_released_total", nil, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := value(t, reg, tt.metric, tt.labels); got != tt.want {
				t.Errorf("%s%v = %v, want %v", tt.metric, tt.labels, got, tt.want)
			}
		})
	}
	t.Run("invalid label value fails only its series", func(t *testing.T) {
		stats.Utilization = append(stats.Utilization, BudgetUtilization{Scope: "dept", Value: "\xff", Period: "day", Ratio: 1})
		if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("gather error = %v, want an invalid UTF-8 error", err)
		}
	})
}

func TestNewRegistersOnce(t *testing.T) {
	reg := NewRegistry()
	if _, err := New(reg, Options{}); err != nil {
		t.Fatalf("first New: %v", err)
	}
	if _, err := New(reg, Options{}); err == nil {
		t.Error("second New on the same registry succeeded")
	}
	if n := count(t, reg, "go_goroutines"); n != 1 {
		t.Errorf("NewRegistry has %d go_goroutines series, want 1", n)
	}
}

func TestNamesPassLint(t *testing.T) {
	g, reg := newGateway(t, Options{})
	r := g.Route("m", "p", "e")
	r.Observe(200, time.Second, time.Second/2, time.Second/4, true)
	r.Observe(499, time.Second, time.Second/2, 0, false)
	r.Unpriced()
	g.Tokens("eng", "m", 1, 1, 1, 1, 1)
	g.Fallback("m", "a", "b")
	g.Retry("p")
	g.Hedge("m", HedgeWon)
	g.SetCircuit("a", CircuitOpen)
	g.RevocationPropagated(time.Second)
	if err := RegisterPublisher(reg, func() PublisherStats { return PublisherStats{} }); err != nil {
		t.Fatal(err)
	}
	if err := RegisterBudgets(reg, func() BudgetStats {
		return BudgetStats{Utilization: []BudgetUtilization{{"dept", "eng", "day", 0.1}}, Reserved: []BudgetReserved{{"dept", "eng", 1}}}
	}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

func TestConcurrentRecording(t *testing.T) {
	g, reg := newGateway(t, Options{MaxDepts: 3})
	const workers, per = 4, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				// Every worker resolves routes and statuses itself, racing the others.
				g.Route("m", "p", "e").Observe([]int{200, 429, 418}[i%3], time.Millisecond, 0, 0, false)
				g.Tokens(fmt.Sprintf("d%d", (w+i)%5), "m", 1, 0, 0, 0, 2)
			}
		}()
	}
	wg.Wait()
	var total float64
	for _, s := range []string{"200", "429", "418"} {
		total += value(t, reg, "tollgate_requests_total", map[string]string{"model": "m", "provider": "p", "endpoint": "e", "status": s})
	}
	if total != workers*per {
		t.Errorf("requests_total sums to %v, want %d", total, workers*per)
	}
	var cost float64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "tollgate_cost_nano_usd_total" {
			if len(mf.GetMetric()) != 4 {
				t.Errorf("%d cost series, want 3 depts + other", len(mf.GetMetric()))
			}
			for _, m := range mf.GetMetric() {
				cost += m.GetCounter().GetValue()
			}
		}
	}
	if cost != 2*workers*per {
		t.Errorf("cost sums to %v, want %d", cost, 2*workers*per)
	}
}

func TestAuthCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterAuth(reg, func() []IssuerKeys {
		return []IssuerKeys{{Issuer: "corp", Keys: 2, Fetches: 5, FetchErrors: 1}, {Issuer: "dev", Keys: 1}}
	}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, metric, issuer string
		want                 float64
	}{
		{"keys", "tollgate_auth_issuer_keys", "corp", 2},
		{"fetches", "tollgate_auth_key_fetches_total", "corp", 5},
		{"fetch errors", "tollgate_auth_key_fetch_errors_total", "corp", 1},
		{"static issuer", "tollgate_auth_issuer_keys", "dev", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := value(t, reg, tt.metric, map[string]string{"issuer": tt.issuer}); got != tt.want {
				t.Errorf("%s{issuer=%q} = %v, want %v", tt.metric, tt.issuer, got, tt.want)
			}
		})
	}
}
