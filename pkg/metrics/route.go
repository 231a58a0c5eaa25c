package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// routeKey identifies a Route.
type routeKey struct{ model, provider, endpoint string }

// Route records the requests of one (model, provider, endpoint) with every
// label child it needs already looked up, so Observe does not allocate.
// Create one per route at config load with Gateway.Route.
type Route struct {
	requests *prometheus.CounterVec
	labels   routeKey

	duration, upstream, ttft, overhead prometheus.Observer
	aborts, unpriced                   prometheus.Counter

	// common holds the requests_total children of the usual statuses, each
	// resolved on first use so that unseen statuses create no series.
	common [numCommonStatuses]atomic.Pointer[counterRef]

	rareMu sync.Mutex
	rare   map[int]prometheus.Counter // children of other statuses; guarded by rareMu
}

// counterRef boxes a counter child so it can sit in an atomic.Pointer.
type counterRef struct{ c prometheus.Counter }

// numCommonStatuses is the number of statuses commonSlot knows.
const numCommonStatuses = 15

// commonSlot returns the index in Route.common of the statuses a gateway
// answers most, or -1.
func commonSlot(status int) int {
	switch status {
	case 200:
		return 0
	case 400:
		return 1
	case 401:
		return 2
	case 403:
		return 3
	case 404:
		return 4
	case 408:
		return 5
	case 413:
		return 6
	case 429:
		return 7
	case 499:
		return 8
	case 500:
		return 9
	case 502:
		return 10
	case 503:
		return 11
	case 504:
		return 12
	case 201:
		return 13
	case 422:
		return 14
	}
	return -1
}

// Route returns the Route of (model, provider, endpoint), creating it on
// first use; later calls return the same *Route. Call it once per route when
// the config is loaded, not per request: it takes a lock and a map lookup.
// For requests refused before a model is resolved (bad token, unknown
// model), use a route with an empty model and provider per endpoint, never
// the model name the client sent, which would let clients create series.
func (g *Gateway) Route(model, provider, endpoint string) *Route {
	k := routeKey{model, provider, endpoint}
	g.routesMu.Lock()
	defer g.routesMu.Unlock()
	if r := g.routes[k]; r != nil {
		return r
	}
	k = routeKey{labelValue(model), labelValue(provider), labelValue(endpoint)}
	r := &Route{
		requests: g.requests,
		labels:   k,
		duration: g.duration.WithLabelValues(k.model, k.provider, k.endpoint),
		upstream: g.upstream.WithLabelValues(k.model, k.provider, k.endpoint),
		ttft:     g.ttft.WithLabelValues(k.model, k.provider, k.endpoint),
		overhead: g.overhead.WithLabelValues(k.model, k.provider, k.endpoint),
		aborts:   g.aborts.WithLabelValues(k.model),
		unpriced: g.unpriced.WithLabelValues(k.model),
		rare:     map[int]prometheus.Counter{},
	}
	g.routes[k] = r
	return r
}

// Observe records one finished request: its status (499 when the client
// went away, which also counts in tollgate_client_aborts_total), its total
// duration, the time spent upstream and, for a stream, the time to first
// token. upstream 0 means the request never reached a provider: it is then
// left out of the upstream and overhead histograms, whose overhead is
// total - upstream. ttft is recorded only when stream is true and ttft > 0.
// Observe does not allocate once the status has been seen on this route.
func (r *Route) Observe(status int, total, upstream, ttft time.Duration, stream bool) {
	r.status(status).Inc()
	r.duration.Observe(total.Seconds())
	if upstream > 0 {
		r.upstream.Observe(upstream.Seconds())
		r.overhead.Observe(max(total-upstream, 0).Seconds())
	}
	if stream && ttft > 0 {
		r.ttft.Observe(ttft.Seconds())
	}
	if status == 499 {
		r.aborts.Inc()
	}
}

// Unpriced counts a request served for this route's model, which has no
// price.
func (r *Route) Unpriced() { r.unpriced.Inc() }

// status returns the requests_total child of status.
func (r *Route) status(status int) prometheus.Counter {
	i := commonSlot(status)
	if i < 0 {
		return r.rareStatus(status)
	}
	if ref := r.common[i].Load(); ref != nil {
		return ref.c
	}
	ref := &counterRef{r.child(status)}
	// Two racing callers get the same child from the vec, so either store wins.
	r.common[i].Store(ref)
	return ref.c
}

func (r *Route) rareStatus(status int) prometheus.Counter {
	r.rareMu.Lock()
	defer r.rareMu.Unlock()
	c := r.rare[status]
	if c == nil {
		c = r.child(status)
		r.rare[status] = c
	}
	return c
}

func (r *Route) child(status int) prometheus.Counter {
	return r.requests.WithLabelValues(r.labels.model, r.labels.provider, r.labels.endpoint, statusLabel(status))
}

// labelValue returns a copy of s that Prometheus accepts as a label value:
// a copy, because s may alias a buffer the caller reuses, and valid UTF-8,
// because WithLabelValues panics on anything else.
func labelValue(s string) string {
	if !utf8.ValidString(s) {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.Clone(s)
}
