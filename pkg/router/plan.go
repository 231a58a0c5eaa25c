package router

import (
	"context"
	"errors"
	"math/bits"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// Errors Plan.Err reports when a plan could not make a single call.
var (
	// ErrAtCapacity: every candidate target is at its rpm or tpm cap. The
	// gateway answers 429 (or 503): capped targets are skipped, not queued.
	ErrAtCapacity = errors.New("every target is at its rpm or tpm cap")
	// ErrNoTarget: no candidate target may be used.
	ErrNoTarget = errors.New("no target available")
)

// maxCalls bounds the calls of one plan: config.MaxAttemptsLimit plus one
// hedge.
const maxCalls = config.MaxAttemptsLimit + 1

// Plan routes one request: it hands out the calls to make, one Attempt at a
// time, and decides after each failure whether to make another. A Plan is
// used by one goroutine at a time (a hedged call's goroutine reports its
// result back to the plan's owner, which calls Done).
type Plan struct {
	r       *Router
	route   *Route
	capture string // what a wildcard route's "*" matched
	allow   ModelFilter

	start    int64 // ns; the request's arrival, -1 until known
	deadline int64 // ns; no call starts after it
	tier     int   // 0: route; i: route.chain[i-1]
	tierN    int   // calls made in the tier
	tried    uint64
	calls    int
	began    bool
	pending  bool // ShouldRetry chose next
	hedged   bool
	next     choice
	delay    time.Duration // pause before next
	err      error

	cur      *Attempt // the latest attempt handed out
	lastDone *Attempt
	slots    [2]Attempt // an attempt and its hedge
	log      [maxCalls]call
	excl     [4]*health // targets out for this request (quota, auth)
	nexcl    int
	skips    [4]skip
	nskips   int
}

// call records one call made by a plan.
type call struct {
	t     *target
	class Class
	done  bool
}

// choice is a target chosen for the next call.
type choice struct {
	t      *target
	idx    int // in its route's targets
	tier   int
	probe  bool
	forced bool
	wait   int64 // ns to wait for the target's Retry-After
}

// mode says which targets a choice may use.
type mode uint8

const (
	normal  mode = iota // available now
	waiting             // also targets whose Retry-After ends within maxWait
	forced              // also open circuits and Retry-After (first call only)
	hedging             // available now, not in flight, one call over the tier's budget
)

// Attempt is one call to make. Its fields say where to send it. An Attempt
// belongs to its Plan and is reused two calls later: do not keep it past
// the request.
type Attempt struct {
	// Route is the name of the model whose target this is (the requested
	// model's route, or a fallback model).
	Route string
	// Provider is the configured provider's name and ProviderIndex its
	// index in config.Providers.
	Provider      string
	ProviderIndex int
	// Model is the upstream model name.
	Model string
	// Key is the API key to send, from the target's api_keys in rotation,
	// and KeyIndex its index; "" and -1 mean the provider's own key.
	Key      string
	KeyIndex int
	// Number counts the plan's calls from 1.
	Number int
	// Fallback is set when the call serves a fallback model.
	Fallback bool
	// Hedge is set for a hedged call (Plan.Hedge).
	Hedge bool
	// Forced is set when the call goes to a target whose circuit is open or
	// that asked to wait (Retry-After), because every candidate was.
	Forced bool
	// Probe is set when the call is the half-open probe of its target.
	Probe bool

	plan    *Plan
	t       *target
	index   int
	started bool
	done    bool
}

// Route returns the route of the requested model.
func (p *Plan) Route() *Route { return p.route }

// Capture returns what the route's "*" matched in the requested name ("" on
// an exact route).
func (p *Plan) Capture() string { return p.capture }

// Release returns the plan to its router for reuse by a later request. It
// is optional (an unreleased plan is garbage collected), but the plan and
// its attempts must not be used after it: call it when the request is over,
// after the last Done and Charge and after reading Attempts and Fallbacks.
func (p *Plan) Release() {
	r := p.r
	if r == nil {
		return // released already
	}
	*p = Plan{}
	r.plans.Put(p)
}

// Next returns the call to make: the first call on the first Next, then
// one after each ShouldRetry that returned true; nil otherwise. When the
// first Next returns nil, Err says why.
func (p *Plan) Next() *Attempt {
	var c choice
	switch {
	case !p.began:
		p.began = true
		clk := clock{r: p.r}
		if p.start < 0 {
			p.start = clk.now()
		}
		p.deadline = p.start + p.route.deadline
		var ok bool
		if c, ok = p.choose(&clk, normal, 0); !ok {
			if c, ok = p.choose(&clk, forced, 0); !ok {
				return nil
			}
		}
	case p.pending:
		p.pending = false
		c = p.next
	default:
		return nil
	}
	return p.begin(c, false)
}

// Err returns why the plan made no call (ErrAtCapacity, ErrNoTarget), or
// nil.
func (p *Plan) Err() error {
	if p.calls > 0 || !p.began {
		return nil
	}
	if p.err == nil {
		return ErrNoTarget
	}
	return p.err
}

// begin hands out the attempt for c.
func (p *Plan) begin(c choice, hedge bool) *Attempt {
	if c.tier != p.tier {
		p.tier, p.tierN, p.tried = c.tier, 0, 0
	}
	p.tierN++
	p.tried |= 1 << c.idx
	a := &p.slots[0]
	if a == p.cur || (a.plan != nil && !a.done && a.started) {
		a = &p.slots[1]
	}
	key, ki := c.t.key()
	*a = Attempt{
		Route: c.t.route.name, Provider: c.t.provider, ProviderIndex: c.t.providerIndex,
		Model: c.t.upstreamModel(p.capture), Key: key, KeyIndex: ki,
		Number: p.calls + 1, Fallback: c.tier > 0, Hedge: hedge, Forced: c.forced, Probe: c.probe,
		plan: p, t: c.t, index: p.calls,
	}
	p.log[p.calls] = call{t: c.t}
	p.calls++
	p.cur = a
	return a
}

// tierRoute returns the route of tier i.
func (p *Plan) tierRoute(i int) *Route {
	if i == 0 {
		return p.route
	}
	return p.route.chain[i-1]
}

// choose finds the next target, from the current tier on, without
// committing to it (except its rpm unit and probe claim).
func (p *Plan) choose(clk *clock, m mode, maxWait int64) (choice, bool) {
	tierN, tried := p.tierN, p.tried
	for tier := p.tier; tier <= len(p.route.chain); tier, tierN, tried = tier+1, 0, 0 {
		rt := p.tierRoute(tier)
		if tier > 0 && p.allow != nil && !p.allow.AllowsModel(rt.name) {
			p.skip(nil, rt, SkipNotAllowed)
			continue
		}
		budget := rt.maxAttempts
		if m == hedging {
			budget++
		}
		if tierN >= budget {
			continue
		}
		if c, ok := p.chooseIn(rt, clk, m, maxWait, tried); ok {
			c.tier = tier
			return c, true
		}
	}
	return choice{}, false
}

// chooseIn picks a target of rt by its strategy: untried ones first, then
// (except when hedging) tried ones again.
func (p *Plan) chooseIn(rt *Route, clk *clock, m mode, maxWait int64, tried uint64) (choice, bool) {
	var avail uint64
	for i, t := range rt.targets {
		if ok, _, _ := p.usable(t, clk, m, maxWait); ok {
			avail |= 1 << i
		}
	}
	for avail != 0 {
		set := avail &^ tried
		if set == 0 {
			if m == hedging {
				return choice{}, false
			}
			set = avail
		}
		i := p.pick(rt, set)
		t := rt.targets[i]
		_, probe, wait := p.usable(t, clk, m, maxWait)
		if m == forced {
			probe = false
		}
		switch {
		case t.rpm.step != 0 && !t.rpm.take(clk.now()):
			p.skip(t, rt, SkipCapped)
		case probe && !t.h.claim(p.r, clk.now()):
			p.skip(t, rt, SkipOpen)
		default:
			return choice{t: t, idx: i, probe: probe, forced: m == forced, wait: wait}, true
		}
		avail &^= 1 << i
	}
	return choice{}, false
}

// usable reports whether t may take the next call in mode m, whether that
// call would be its probe, and how long it must wait for its Retry-After.
func (p *Plan) usable(t *target, clk *clock, m mode, maxWait int64) (ok, probe bool, wait int64) {
	h := t.h
	for _, x := range p.excl[:p.nexcl] {
		if x == h {
			return false, false, 0
		}
	}
	if (t.rpm.step != 0 || t.tpm.step != 0) && (!t.rpm.room(clk.now()) || !t.tpm.room(clk.now())) {
		p.skip(t, t.route, SkipCapped)
		p.err = ErrAtCapacity
		return false, false, 0
	}
	if m == forced {
		return true, false, 0
	}
	if m == hedging && p.inFlight(h) {
		return false, false, 0
	}
	if ok, probe = h.check(clk); !ok {
		p.skip(t, t.route, SkipOpen)
		return false, false, 0
	}
	if ra := h.retryAt.Load(); ra != 0 {
		now := clk.now()
		switch {
		case ra <= now:
			h.retryAt.CompareAndSwap(ra, 0) // over: spare later requests the clock
		case m != waiting || ra-now > maxWait:
			p.skip(t, t.route, SkipRetryAfter)
			return false, false, 0
		default:
			wait = ra - now
		}
	}
	return true, probe, wait
}

// clock reads the router's clock once, when first needed: a request whose
// targets are healthy and uncapped never reads it.
type clock struct {
	r  *Router
	ns int64
	ok bool
}

func (c *clock) now() int64 {
	if !c.ok {
		c.ns, c.ok = c.r.nanos(), true
	}
	return c.ns
}

// inFlight reports whether a call of this plan to h is in flight.
func (p *Plan) inFlight(h *health) bool {
	for i := range p.slots {
		if a := &p.slots[i]; a.plan != nil && !a.done && a.t.h == h {
			return true
		}
	}
	return false
}

// pick returns the index of one target of set (not empty) by rt's strategy.
func (p *Plan) pick(rt *Route, set uint64) int {
	if set&(set-1) == 0 {
		return bits.TrailingZeros64(set)
	}
	n := len(rt.targets)
	switch rt.strategy {
	case ordered:
		return bits.TrailingZeros64(set)
	case roundRobin:
		start := int((rt.rr.Add(1) - 1) % uint64(n))
		return firstFrom(set, start, n)
	case leastInFlight:
		return p.lowest(rt, set, func(t *target) int64 { return t.h.inflight.Load() })
	case lowestLatency:
		// One pick in 16 explores, so a target that got faster is seen.
		if p.r.rand()&15 == 0 {
			return randomBit(set, p.r.rand())
		}
		return p.lowest(rt, set, func(t *target) int64 { return t.h.lat.ewma.Load() })
	}
	var sum uint64
	for s := set; s != 0; s &= s - 1 {
		sum += rt.targets[bits.TrailingZeros64(s)].weight
	}
	x := p.r.rand() % sum
	for s := set; s != 0; s &= s - 1 {
		i := bits.TrailingZeros64(s)
		w := rt.targets[i].weight
		if x < w {
			return i
		}
		x -= w
	}
	return bits.TrailingZeros64(set)
}

// lowest returns the target of set with the lowest value, ties broken at
// random.
func (p *Plan) lowest(rt *Route, set uint64, value func(*target) int64) int {
	n := len(rt.targets)
	start := int(p.r.rand() % uint64(n))
	best, bestV := -1, int64(0)
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if set&(1<<i) == 0 {
			continue
		}
		if v := value(rt.targets[i]); best < 0 || v < bestV {
			best, bestV = i, v
		}
	}
	return best
}

// firstFrom returns the first index of set at or after start, wrapping.
func firstFrom(set uint64, start, n int) int {
	if hi := set >> start << start; hi != 0 {
		return bits.TrailingZeros64(hi)
	}
	return bits.TrailingZeros64(set)
}

// randomBit returns the index of a random bit of set.
func randomBit(set uint64, x uint64) int {
	k := int(x % uint64(bits.OnesCount64(set)))
	for ; k > 0; k-- {
		set &= set - 1
	}
	return bits.TrailingZeros64(set)
}

// Start marks the call as in flight (for least_inflight and Snapshot).
func (a *Attempt) Start() {
	if !a.started && !a.done {
		a.started = true
		a.t.h.inflight.Add(1)
	}
}

// Done reports the call's outcome: it feeds the target's circuit breaker
// and, for a success with ttft > 0, its latency (time to first token, or to
// the whole answer for a non-stream call). Call it once per attempt,
// before ShouldRetry; for a stream, at its end.
func (a *Attempt) Done(o Outcome, ttft time.Duration) {
	if a.done {
		return
	}
	a.done = true
	p, t := a.plan, a.t
	e := o.Class.effect()
	var now int64 // the clock is read only when the outcome needs it
	if e == failed || a.Probe || a.Forced || o.RetryAfter > 0 || p.r.circuit.rate > 0 {
		now = p.r.nanos()
	}
	if a.started {
		t.h.inflight.Add(-1)
	}
	t.h.result(p.r, now, e, a.Probe, a.Forced)
	if o.Class == Success && ttft > 0 {
		t.h.lat.observe(int64(ttft))
	}
	if o.RetryAfter > 0 {
		ra := now + int64(min(o.RetryAfter, maxRetryAfter))
		for {
			old := t.h.retryAt.Load()
			if old >= ra || t.h.retryAt.CompareAndSwap(old, ra) {
				break
			}
		}
	}
	p.log[a.index].class, p.log[a.index].done = o.Class, true
	p.lastDone = a
}

// Charge counts tokens against the target's tpm cap. Call it when the
// call's usage is known (it may be after Done).
func (a *Attempt) Charge(tokens int64) {
	if a.t.tpm.step != 0 {
		a.t.tpm.charge(a.plan.r.nanos(), tokens)
	}
}

// Deployment returns "provider/model" for the usage event.
func (a *Attempt) Deployment() string {
	if !a.t.route.wildcard {
		return a.t.deployment
	}
	return a.Provider + "/" + a.Model
}

// ShouldRetry reports whether another call follows the one whose outcome is
// o (the last Done): the model's fallback_on allows o's class, nothing had
// reached the client, the deadline has not passed, and a target remains
// within the attempt budgets. It chooses that target; call Backoff, then
// Next. Context-length and content-policy failures move on to the next
// fallback model; quota and auth failures rule their target out for the
// request.
func (p *Plan) ShouldRetry(o Outcome) bool {
	p.pending = false
	if o.Class == Success || o.Started || p.route.triggers&(1<<o.Class) == 0 || p.calls >= maxCalls-1 {
		return false
	}
	clk := clock{r: p.r}
	now := clk.now()
	if now >= p.deadline {
		return false
	}
	if last := p.lastDone; last != nil {
		switch o.Class {
		case ContextLength, ContentPolicy:
			if last.t.route == p.tierRoute(p.tier) {
				p.tier, p.tierN, p.tried = p.tier+1, 0, 0
			}
		case Quota, Auth:
			if p.nexcl < len(p.excl) {
				p.excl[p.nexcl] = last.t.h
				p.nexcl++
			}
		}
	}
	maxWait := min(p.route.backoffMax, p.deadline-now)
	c, ok := p.choose(&clk, normal, 0)
	if !ok {
		if c, ok = p.choose(&clk, waiting, maxWait); !ok {
			return false
		}
	}
	wait := c.wait
	if n := p.triedCount(c.t.h); n > 0 {
		wait = max(wait, p.backoff(n))
	}
	if now+wait >= p.deadline {
		return false
	}
	p.next, p.delay, p.pending = c, time.Duration(wait), true
	return true
}

// triedCount returns how many calls of the plan went to h.
func (p *Plan) triedCount(h *health) int {
	n := 0
	for _, c := range p.log[:p.calls] {
		if c.t.h == h {
			n++
		}
	}
	return n
}

// backoff returns the pause before the n-th retry of a target: base
// doubled n-1 times, at most the route's backoff_max, then drawn between
// half and all of it.
func (p *Plan) backoff(n int) int64 {
	rt := p.route
	d := rt.backoffMax
	if n-1 < 40 {
		d = min(rt.backoffBase<<(n-1), rt.backoffMax)
	}
	half := d / 2
	return half + int64(p.r.rand()%uint64(d-half+1))
}

// Delay returns the pause Backoff will take before the next call.
func (p *Plan) Delay() time.Duration {
	if !p.pending {
		return 0
	}
	return p.delay
}

// Backoff waits for the pause chosen by ShouldRetry (none when the next
// call goes to a target not yet tried and not waiting out a Retry-After),
// or until ctx is done, then returns ctx's error.
func (p *Plan) Backoff(ctx context.Context) error {
	if !p.pending || p.delay <= 0 {
		return ctx.Err()
	}
	return p.r.sleep(ctx, p.delay)
}

// HedgeAfter returns how long after the latest call started, without a
// first byte, the gateway should start a hedge (Hedge); 0 means no hedge:
// hedging is off for the model, a hedge was made, there is no other
// target, or (p95 mode) the target has too few samples yet.
func (p *Plan) HedgeAfter() time.Duration {
	rt := p.route
	if !rt.hedgeable || p.hedged || p.cur == nil {
		return 0
	}
	if rt.hedgeP95 {
		return p.cur.t.h.lat.P95()
	}
	return time.Duration(rt.hedgeAfter)
}

// Hedge returns a second call to race the one in flight: the next target
// by the usual order, neither the in-flight one nor over its cap, even when
// the model's max_attempts is spent (a hedge is one extra call). nil when
// HedgeAfter is 0 or no target is available. The gateway uses the first answer and
// cancels the other (Done with Canceled).
func (p *Plan) Hedge() *Attempt {
	if p.HedgeAfter() == 0 || p.pending || p.calls >= maxCalls {
		return nil
	}
	p.hedged = true
	c, ok := p.choose(&clock{r: p.r}, hedging, 0)
	if !ok {
		return nil
	}
	return p.begin(c, true)
}

// Attempts returns the number of calls made (for x-tollgate-attempts).
func (p *Plan) Attempts() int { return p.calls }

// Fallbacks returns the targets ("provider/model") of the calls that did
// not serve the request, in the order made (for the usage event); nil when
// the first call served it.
func (p *Plan) Fallbacks() []string {
	var out []string
	for i := range p.log[:p.calls] {
		if c := p.log[i]; c.class != Success || !c.done {
			out = append(out, p.deployment(c.t))
		}
	}
	return out
}

// Tried describes one call of a plan.
type Tried struct {
	Route  string // model whose target it was
	Target string // provider/model
	Class  Class  // its outcome (Success until Done)
	Done   bool
}

// Tried returns every call made, in order, with its outcome: reroutes after
// a content-policy refusal show here, for the log.
func (p *Plan) Tried() []Tried {
	out := make([]Tried, p.calls)
	for i, c := range p.log[:p.calls] {
		out[i] = Tried{Route: c.t.route.name, Target: p.deployment(c.t), Class: c.class, Done: c.done}
	}
	return out
}

func (p *Plan) deployment(t *target) string {
	if !t.route.wildcard {
		return t.deployment
	}
	return t.provider + "/" + t.upstreamModel(p.capture)
}

// SkipReason says why a target was passed over.
type SkipReason uint8

// Reasons a target was skipped.
const (
	SkipOpen       SkipReason = iota + 1 // its circuit is open (or another request holds the probe)
	SkipRetryAfter                       // it asked to wait (Retry-After)
	SkipCapped                           // it is at its rpm or tpm cap
	SkipNotAllowed                       // the caller may not use the fallback model
)

var skipNames = [...]string{"", "circuit_open", "retry_after", "capped", "not_allowed"}

// String returns the reason's name, e.g. "circuit_open".
func (s SkipReason) String() string {
	if int(s) < len(skipNames) {
		return skipNames[s]
	}
	return "unknown"
}

// Skip is a target (or, for SkipNotAllowed, a whole fallback model) a plan
// passed over.
type Skip struct {
	Route  string
	Target string // empty for SkipNotAllowed
	Reason SkipReason
}

type skip struct {
	t      *target
	rt     *Route
	reason SkipReason
}

// skip records a skipped target once; the first four are kept.
func (p *Plan) skip(t *target, rt *Route, why SkipReason) {
	for _, s := range p.skips[:p.nskips] {
		if s.t == t && s.rt == rt && s.reason == why {
			return
		}
	}
	if p.nskips < len(p.skips) {
		p.skips[p.nskips] = skip{t: t, rt: rt, reason: why}
		p.nskips++
	}
}

// Skips returns the targets passed over so far (at most four), for logs
// and metrics.
func (p *Plan) Skips() []Skip {
	if p.nskips == 0 {
		return nil
	}
	out := make([]Skip, p.nskips)
	for i, s := range p.skips[:p.nskips] {
		out[i] = Skip{Route: s.rt.name, Reason: s.reason}
		if s.t != nil {
			out[i].Target = p.deployment(s.t)
		}
	}
	return out
}
