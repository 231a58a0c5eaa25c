package router

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// State is a circuit breaker state. Its values are those of the
// tollgate_circuit_state gauge.
type State uint8

// Circuit states.
const (
	// Closed: the target gets traffic.
	Closed State = 0
	// HalfOpen: the cooldown is over and one probe request is in flight.
	HalfOpen State = 1
	// Open: the target is skipped until its cooldown ends.
	Open State = 2
)

// String returns closed, half_open or open.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return "unknown"
}

// MarshalText encodes the state as its name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// winBuckets is the number of buckets of a target's failure-rate window.
const winBuckets = 10

// circuitConfig is config.Circuit in nanoseconds.
type circuitConfig struct {
	failures    int32 // consecutive failures that open; 0: rule off
	rate        float64
	minRequests uint64
	bucket      int64 // window / winBuckets
	cooldown    int64
}

func newCircuitConfig(c config.Circuit) circuitConfig {
	cc := circuitConfig{
		failures:    int32(c.Failures),
		rate:        c.FailureRate,
		minRequests: uint64(max(1, c.MinRequests)),
		bucket:      int64(orDuration(c.Window, config.DefaultCircuitWindow)) / winBuckets,
		cooldown:    int64(orDuration(c.Cooldown, config.DefaultCooldown)),
	}
	if c.Failures == 0 {
		cc.failures = config.DefaultCircuitFailures
	}
	if c.Failures < 0 {
		cc.failures = 0
	}
	if c.MinRequests == 0 {
		cc.minRequests = config.DefaultMinRequests
	}
	return cc
}

// health is the passive health of one deployment (provider/upstream model),
// shared by every route that lists it.
type health struct {
	deployment, provider, model string

	// circ packs the circuit state (low 2 bits) and a time (ns since
	// Router.base, shifted left 2): the end of the cooldown when open, the
	// probe's deadline when half-open. One word, so one CAS moves both.
	circ     atomic.Uint64
	consec   atomic.Int32 // consecutive failures while closed
	inflight atomic.Int64
	retryAt  atomic.Int64 // ns; the target asked (Retry-After) not to be called before
	win      [winBuckets]atomic.Uint64
	lat      latency
}

func pack(s State, t int64) uint64 { return uint64(max(0, t))<<2 | uint64(s) }

func unpack(v uint64) (State, int64) { return State(v & 3), int64(v >> 2) }

// check reports whether the circuit lets a call through now, and whether
// that call would be the half-open probe (to be claimed with claim).
func (h *health) check(clk *clock) (ok, probe bool) {
	s, t := unpack(h.circ.Load())
	if s == Closed {
		return true, false
	}
	if clk.now() >= t {
		return true, true
	}
	return false, false
}

// claim makes the caller the probe of an open circuit whose cooldown is
// over (or of a half-open one whose probe has not reported by its
// deadline). It fails when another request claimed it first.
func (h *health) claim(r *Router, now int64) bool {
	v := h.circ.Load()
	s, t := unpack(v)
	switch {
	case s == Closed:
		return true
	case now < t:
		return false
	case !h.circ.CompareAndSwap(v, pack(HalfOpen, now+r.circuit.cooldown)):
		return false
	}
	if s != HalfOpen {
		r.notify(h, HalfOpen)
	}
	return true
}

// effect is what an outcome means for the circuit.
type effect uint8

const (
	neutral effect = iota // says nothing about the target (client went away)
	healthy               // the target answered
	failed                // the target failed
)

// result feeds one call's effect to the circuit. probe is set for the
// call that claimed the half-open probe; forced for a call sent although
// the circuit was open (every candidate was).
func (h *health) result(r *Router, now int64, e effect, probe, forced bool) {
	cc := &r.circuit
	if cc.rate > 0 && e != neutral {
		h.record(now, e == failed, cc)
	}
	switch e {
	case healthy:
		if h.consec.Load() != 0 {
			h.consec.Store(0)
		}
		if probe || forced {
			h.close(r)
		}
	case failed:
		v := h.circ.Load()
		s, _ := unpack(v)
		switch {
		case probe && s == HalfOpen:
			if h.circ.CompareAndSwap(v, pack(Open, now+cc.cooldown)) {
				r.notify(h, Open)
			}
		case s == Closed:
			n := h.consec.Add(1)
			if cc.failures > 0 && n >= cc.failures || h.rateTripped(now, cc) {
				if h.circ.CompareAndSwap(v, pack(Open, now+cc.cooldown)) {
					h.consec.Store(0)
					r.notify(h, Open)
				}
			}
		}
	case neutral:
		// A probe that proved nothing hands the probe to the next request.
		if v := h.circ.Load(); probe && State(v&3) == HalfOpen {
			if h.circ.CompareAndSwap(v, pack(Open, now)) {
				r.notify(h, Open)
			}
		}
	}
}

// close closes an open or half-open circuit and forgets the failures that
// opened it.
func (h *health) close(r *Router) {
	for {
		v := h.circ.Load()
		if State(v&3) == Closed {
			return
		}
		if h.circ.CompareAndSwap(v, pack(Closed, 0)) {
			for i := range h.win {
				h.win[i].Store(0)
			}
			h.consec.Store(0)
			r.notify(h, Closed)
			return
		}
	}
}

// record counts one call in the failure-rate window. A bucket packs its
// epoch (high 32 bits), failures and calls (16 bits each, saturating).
func (h *health) record(now int64, fail bool, cc *circuitConfig) {
	ep := uint64(now/cc.bucket) & 0xffffffff
	b := &h.win[ep%winBuckets]
	for {
		old := b.Load()
		calls, fails := uint64(1), uint64(0)
		if fail {
			fails = 1
		}
		if old>>32 == ep {
			calls, fails = old&0xffff, old>>16&0xffff
			if calls < 0xffff {
				calls++
				if fail {
					fails++
				}
			}
		}
		if b.CompareAndSwap(old, ep<<32|fails<<16|calls) {
			return
		}
	}
}

// window returns the calls and failures counted in the last window.
func (h *health) window(now int64, cc *circuitConfig) (calls, fails uint64) {
	if cc.bucket <= 0 {
		return 0, 0
	}
	cur := uint64(now/cc.bucket) & 0xffffffff
	for i := range h.win {
		v := h.win[i].Load()
		if uint32(cur-v>>32) < winBuckets {
			calls += v & 0xffff
			fails += v >> 16 & 0xffff
		}
	}
	return calls, fails
}

func (h *health) rateTripped(now int64, cc *circuitConfig) bool {
	if cc.rate <= 0 {
		return false
	}
	calls, fails := h.window(now, cc)
	return calls >= cc.minRequests && float64(fails) >= cc.rate*float64(calls)
}

// Latency tracking.
const (
	ringSize      = 128 // recent samples kept for the p95
	minP95Samples = 20  // samples before a p95 is reported
	p95Every      = 16  // new samples between two p95 computations
)

// latency tracks a target's time to first token: a moving average (alpha
// 1/5) for the latency strategy, and a ring of recent samples whose 95th
// percentile is recomputed lazily, by one reader at a time, for hedging.
type latency struct {
	ewma atomic.Int64 // ns; 0 until the first sample
	n    atomic.Uint64
	ring [ringSize]atomic.Int64
	p95  atomic.Int64
	p95n atomic.Uint64 // n when p95 was computed
	mu   sync.Mutex    // held while computing p95 (TryLock: readers never wait)
}

func (l *latency) observe(d int64) {
	d = max(1, d)
	i := l.n.Add(1) - 1
	l.ring[i%ringSize].Store(d)
	for {
		old := l.ewma.Load()
		v := d
		if old != 0 {
			v = max(1, old+(d-old)/5)
		}
		if l.ewma.CompareAndSwap(old, v) {
			return
		}
	}
}

// P95 returns the 95th percentile of the recent samples, or 0 with fewer
// than minP95Samples.
func (l *latency) P95() time.Duration {
	n := l.n.Load()
	if n < minP95Samples {
		return 0
	}
	if (n-l.p95n.Load() >= p95Every || l.p95.Load() == 0) && l.mu.TryLock() {
		var buf [ringSize]int64
		k := int(min(n, ringSize))
		for i := 0; i < k; i++ {
			buf[i] = l.ring[i].Load()
		}
		s := buf[:k]
		slices.Sort(s)
		l.p95.Store(s[(95*k+99)/100-1])
		l.p95n.Store(n)
		l.mu.Unlock()
	}
	return time.Duration(l.p95.Load())
}

// TargetState is the visible state of one target, for the admin endpoint
// and metrics.
type TargetState struct {
	// Target is "provider/model" (model "*" for a wildcard route's target).
	Target   string `json:"target"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	State    State  `json:"state"`
	// ConsecutiveFailures counts failures since the last success while
	// closed.
	ConsecutiveFailures int `json:"consecutive_failures"`
	// WindowCalls and WindowFailures are counted over routing.circuit.window
	// (only when failure_rate is set).
	WindowCalls    uint64 `json:"window_calls"`
	WindowFailures uint64 `json:"window_failures"`
	// OpenUntil is the end of the cooldown (open) or the probe's deadline
	// (half-open).
	OpenUntil time.Time `json:"open_until,omitzero"`
	// RetryAfterUntil is when a Retry-After the target sent ends; it is
	// skipped until then.
	RetryAfterUntil time.Time `json:"retry_after_until,omitzero"`
	InFlight        int64     `json:"in_flight"`
	// EWMATTFT is the moving average time to first token; P95TTFT the 95th
	// percentile of the last 128 (0 until 20 were seen). Samples counts
	// every success seen.
	EWMATTFT time.Duration `json:"ewma_ttft_ns"`
	P95TTFT  time.Duration `json:"p95_ttft_ns"`
	Samples  uint64        `json:"samples"`
}

// Snapshot returns the state of every target, in config order.
func (r *Router) Snapshot() []TargetState {
	now := r.nanos()
	out := make([]TargetState, len(r.healths))
	for i, h := range r.healths {
		s, t := unpack(h.circ.Load())
		calls, fails := h.window(now, &r.circuit)
		ts := TargetState{
			Target: h.deployment, Provider: h.provider, Model: h.model, State: s,
			ConsecutiveFailures: int(h.consec.Load()),
			WindowCalls:         calls, WindowFailures: fails,
			InFlight: h.inflight.Load(),
			EWMATTFT: time.Duration(h.lat.ewma.Load()),
			P95TTFT:  h.lat.P95(),
			Samples:  h.lat.n.Load(),
		}
		if s != Closed {
			ts.OpenUntil = r.time(t)
		}
		if ra := h.retryAt.Load(); ra > now {
			ts.RetryAfterUntil = r.time(ra)
		}
		out[i] = ts
	}
	return out
}
