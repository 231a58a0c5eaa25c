// Package metrics defines the gateway's Prometheus metrics on an injected
// registry.
//
// Names carry the tollgate_ prefix, values are in base units (seconds,
// bytes, nano-USD) and counters end in _total. Recording a finished request
// is the hot path: a Route holds its label children already looked up, so
// (*Route).Observe costs a few atomic adds and no allocation. Token and cost
// counters are looked up in a sharded cache keyed by dept and model
// (Gateway.Tokens). Gauges that mirror other components' state (publisher
// queue, budget utilization) are read by collectors at scrape time from a
// snapshot func, so those components need no Prometheus dependency.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
)

// DefaultMaxDepts is the default number of distinct dept label values the
// token and cost counters keep before new depts are counted as OtherDept.
const DefaultMaxDepts = 1000

// OtherDept is the dept label of token and cost counts for depts seen after
// Options.MaxDepts distinct ones. A real dept named "other" shares it.
const OtherDept = "other"

// durationBuckets suit whole LLM requests and upstream calls, in seconds: a
// few milliseconds (errors, embeddings) to ten minutes (long reasoning
// streams; the default upstream total timeout is 10m).
func durationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}
}

// ttftBuckets suit time to first token, in seconds: tens of milliseconds for
// small hosted models to a minute for a loaded or reasoning model.
func ttftBuckets() []float64 {
	return []float64{0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60}
}

// overheadBuckets resolve the gateway's own time, in seconds: expected well
// under a millisecond, up to a second for a pathological case.
func overheadBuckets() []float64 {
	return []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
}

// revocationBuckets cover a revocation's trip through NATS to a gateway, in
// seconds.
func revocationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
}

// CircuitState is the value of tollgate_circuit_state.
type CircuitState int

// The circuit states, as gauge values.
const (
	CircuitClosed   CircuitState = 0
	CircuitHalfOpen CircuitState = 1
	CircuitOpen     CircuitState = 2
)

// Options configure a Gateway. Zero values take the defaults shown.
type Options struct {
	// MaxDepts caps the distinct dept label values of tollgate_tokens_total
	// and tollgate_cost_nano_usd_total. Depts are bounded by the token
	// issuers, but a cap keeps a misbehaving issuer from exhausting
	// Prometheus: once MaxDepts depts have been seen, the counts of any new
	// dept go to the label OtherDept. Default DefaultMaxDepts.
	MaxDepts int
}

// Gateway holds the gateway's metrics. All methods are safe for concurrent
// use.
type Gateway struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	upstream   *prometheus.HistogramVec
	ttft       *prometheus.HistogramVec
	overhead   *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	cost       *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	retries    *prometheus.CounterVec
	circuit    *prometheus.GaugeVec
	unpriced   *prometheus.CounterVec
	aborts     *prometheus.CounterVec
	hedges     *prometheus.CounterVec
	revocation prometheus.Histogram

	routesMu sync.Mutex
	routes   map[routeKey]*Route // guarded by routesMu

	seed     maphash.Seed
	shards   [usageShards]usageShard
	maxDepts int
	deptsMu  sync.Mutex
	depts    map[string]struct{} // admitted dept labels; guarded by deptsMu
}

// New creates the gateway metrics and registers them on reg. It fails when
// reg already holds metrics of the same names.
func New(reg prometheus.Registerer, o Options) (*Gateway, error) {
	if o.MaxDepts <= 0 {
		o.MaxDepts = DefaultMaxDepts
	}
	route := []string{"model", "provider", "endpoint"}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, route)
	}
	g := &Gateway{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_requests_total",
			Help: "Requests answered, by model, provider, endpoint and HTTP status (499: the client went away).",
		}, []string{"model", "provider", "endpoint", "status"}),
		duration: hist("tollgate_request_duration_seconds",
			"Time from receiving a request to the end of its answer (the last chunk of a stream).", durationBuckets()),
		upstream: hist("tollgate_upstream_duration_seconds",
			"Time spent in upstream calls of requests that reached a provider.", durationBuckets()),
		ttft: hist("tollgate_ttft_seconds",
			"Time from receiving a streamed request to relaying its first token.", ttftBuckets()),
		overhead: hist("tollgate_overhead_seconds",
			"Gateway overhead of requests that reached a provider: total duration minus upstream time.", overheadBuckets()),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_tokens_total",
			Help: "Tokens used, by dept, model and direction (prompt, completion, cached, reasoning).",
		}, []string{"dept", "model", "direction"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_cost_nano_usd_total",
			Help: "Cost of requests in nano-USD (1e-9 USD), by dept and model.",
		}, []string{"dept", "model"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_fallbacks_total",
			Help: "Requests for a model moved from one target to the next.",
		}, []string{"model", "from", "to"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_retries_total",
			Help: "Upstream calls retried, by provider.",
		}, []string{"provider"}),
		circuit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_circuit_state",
			Help: "Circuit breaker state per target: 0 closed, 1 half-open, 2 open.",
		}, []string{"target"}),
		unpriced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_unpriced_requests_total",
			Help: "Requests served for a model with no price (billed 0).",
		}, []string{"model"}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_client_aborts_total",
			Help: "Requests whose client went away before the answer ended.",
		}, []string{"model"}),
		hedges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_hedges_total",
			Help: "Hedged requests, by model and event: started (a second call raced a slow first one), won (the second call answered first), cancelled (a losing call was cancelled and its connection closed).",
		}, []string{"model", "event"}),
		revocation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_revocation_propagation_seconds",
			Help:    "Time from a token or API key revocation being issued to this gateway applying it.",
			Buckets: revocationBuckets(),
		}),
		routes:   map[routeKey]*Route{},
		seed:     maphash.MakeSeed(),
		maxDepts: o.MaxDepts,
		depts:    map[string]struct{}{},
	}
	for i := range g.shards {
		g.shards[i].m = map[usageKey]*usageChildren{}
	}
	for _, c := range []prometheus.Collector{g.requests, g.duration, g.upstream, g.ttft, g.overhead,
		g.tokens, g.cost, g.fallbacks, g.retries, g.circuit, g.unpriced, g.aborts, g.hedges, g.revocation} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register gateway metrics: %w", err)
		}
	}
	return g, nil
}

// NewRegistry returns a registry holding the Go runtime and process
// collectors, ready for New and the Register funcs.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Fallback counts a request for model moved from target from to target to.
// Fallbacks are rare, so it looks the child up on each call.
func (g *Gateway) Fallback(model, from, to string) {
	g.fallbacks.WithLabelValues(model, from, to).Inc()
}

// HedgeEvent is the event label of tollgate_hedges_total.
type HedgeEvent string

// The events of a hedged request.
const (
	HedgeStarted   HedgeEvent = "started"   // a second call started because the first was slow
	HedgeWon       HedgeEvent = "won"       // the second call answered first
	HedgeCancelled HedgeEvent = "cancelled" // a losing call was cancelled (its connection closed)
)

// Hedge counts one event of a hedged request for model. Hedges are rare
// (only slow calls of models with hedging on), so it looks the child up on
// each call.
func (g *Gateway) Hedge(model string, e HedgeEvent) {
	g.hedges.WithLabelValues(model, string(e)).Inc()
}

// Retry counts a retried upstream call to provider.
func (g *Gateway) Retry(provider string) {
	g.retries.WithLabelValues(provider).Inc()
}

// SetCircuit records the circuit breaker state of target.
func (g *Gateway) SetCircuit(target string, s CircuitState) {
	g.circuit.WithLabelValues(target).Set(float64(s))
}

// RevocationPropagated records how long a token revocation took to reach
// this gateway.
func (g *Gateway) RevocationPropagated(d time.Duration) {
	g.revocation.Observe(d.Seconds())
}

// statusLabel is the status label value of an HTTP status code.
func statusLabel(status int) string { return strconv.Itoa(status) }

// Serve serves reg's metrics on addr (every path) in g until ctx ends,
// then shuts the listener down within 5 s. It is the metrics listener of
// the programs without an admin listener (the budget and analytics
// services); addr "" serves nothing.
func Serve(ctx context.Context, g *errgroup.Group, addr string, reg prometheus.Gatherer) {
	if addr == "" {
		return
	}
	srv := &http.Server{Addr: addr, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	g.Go(func() error {
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics listener: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
}
