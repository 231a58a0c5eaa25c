// Package router decides where each request goes and what happens when that
// fails: it resolves a model name (exact, alias or wildcard) to its targets,
// balances load among them, falls back to other models, retries with
// backoff, breaks circuits and hedges slow calls.
//
// The gateway drives one [Plan] per request:
//
//	plan := r.Plan(model, principal, start) // nil: unknown model (404)
//	defer plan.Release()
//	for a := plan.Next(); a != nil; a = plan.Next() {
//		a.Start()
//		// ... call a.Provider with a.Model and a.Key ...
//		o := router.Classify(status, err, errBody, nothingSentYet)
//		o.RetryAfter = router.ParseRetryAfter(retryAfterHeader, now)
//		a.Done(o, ttft)
//		if !plan.ShouldRetry(o) || plan.Backoff(ctx) != nil {
//			break
//		}
//	}
//	// plan.Attempts(), plan.Fallbacks() for headers and the usage event;
//	// plan.Err() when the first Next returned nil.
//
// With hedging on, after starting a call the gateway waits HedgeAfter for
// its first byte, then races a second call from Hedge and cancels the
// loser (Done with Canceled).
//
// A plan tries the requested model's targets (up to its retry.max_attempts
// calls, untried targets first, chosen by its strategy), then each of its
// fallback models in order (each with its own max_attempts), then the
// global default fallback. It skips targets whose circuit is open, that
// asked to be left alone with Retry-After, or that are at their rpm/tpm cap
// (skipped, never queued). When every candidate's circuit is open (or every
// one is waiting out a Retry-After) the first call goes out anyway: a
// request is never refused only because of the breaker.
//
// Everything a request touches is per target and lock free (atomics): no
// lock is shared by every request. The clock, the random source and sleeping
// are injected.
package router

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// Options are a Router's dependencies. Zero values take the defaults shown.
type Options struct {
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Rand returns uniformly random 64-bit numbers; it is called from every
	// request goroutine at once. Default math/rand/v2's Uint64 (per thread,
	// no lock). Tests inject a seeded source.
	Rand func() uint64
	// Sleep waits d or until ctx is done (then it returns ctx's error). It
	// runs Plan.Backoff. Default a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnState, when set, is called on every circuit transition with the
	// target ("provider/model") and its new state, from the goroutine that
	// caused it; it must not block. Feed it to the circuit state gauge.
	OnState func(target string, s State)
	// Previous, when set, is the router this one replaces (config reload):
	// the state of targets present in both (circuit, latency, in-flight,
	// Retry-After) carries over.
	Previous *Router
}

// ModelFilter tells whether the caller may use a model; *auth.Principal
// satisfies it. Fallback models the caller may not use are skipped.
type ModelFilter interface {
	AllowsModel(model string) bool
}

// Router holds the routes of one config and the state of their targets. It
// is safe for concurrent use.
type Router struct {
	now     func() time.Time
	base    time.Time // origin of the int64 nanosecond times kept in atomics
	rand    func() uint64
	sleep   func(ctx context.Context, d time.Duration) error
	onState func(string, State)
	circuit circuitConfig

	exact   map[string]*Route // names and aliases
	wild    []*Route          // wildcard routes, most specific first
	routes  []*Route          // in config order
	healths []*health         // one per target, in first-seen order
	plans   sync.Pool         // released *Plan, zeroed
}

// New builds the routes of cfg, which must be validated with its defaults
// applied (config.Load does both).
func New(cfg *config.Config, o Options) (*Router, error) {
	r := &Router{now: o.Now, rand: o.Rand, sleep: o.Sleep, onState: o.OnState}
	if r.now == nil {
		r.now = time.Now
	}
	if r.rand == nil {
		r.rand = rand.Uint64
	}
	if r.sleep == nil {
		r.sleep = sleep
	}
	r.base = r.now()
	var old map[string]*health
	if o.Previous != nil {
		r.base = o.Previous.base
		old = make(map[string]*health, len(o.Previous.healths))
		for _, h := range o.Previous.healths {
			old[h.deployment] = h
		}
	}
	r.circuit = newCircuitConfig(cfg.Routing.Circuit)
	if err := r.build(cfg, old); err != nil {
		return nil, err
	}
	return r, nil
}

// build creates the routes and their targets, then links fallback chains.
func (r *Router) build(cfg *config.Config, old map[string]*health) error {
	providers := make(map[string]int, len(cfg.Providers))
	for i, p := range cfg.Providers {
		providers[p.Name] = i
	}
	healths := map[string]*health{}
	r.exact = make(map[string]*Route, len(cfg.Models))
	for i := range cfg.Models {
		rt, err := newRoute(&cfg.Models[i], providers, func(dep, prov, model string) *health {
			h := healths[dep]
			if h == nil {
				h = old[dep]
				if h == nil {
					h = &health{deployment: dep, provider: prov, model: model}
				}
				healths[dep] = h
				r.healths = append(r.healths, h)
			}
			return h
		})
		if err != nil {
			return err
		}
		r.routes = append(r.routes, rt)
		if rt.wildcard {
			r.wild = append(r.wild, rt)
			continue
		}
		for _, name := range append([]string{rt.name}, rt.cfg.Aliases...) {
			if _, dup := r.exact[name]; dup {
				return fmt.Errorf("model %s: name %q is used twice", rt.name, name)
			}
			r.exact[name] = rt
		}
	}
	slices.SortStableFunc(r.wild, func(a, b *Route) int { return len(b.name) - len(a.name) })
	for _, rt := range r.routes {
		if err := r.link(rt, cfg.Routing.DefaultFallback); err != nil {
			return err
		}
	}
	return nil
}

// link sets rt's fallback chain: its own fallbacks, then the default.
func (r *Router) link(rt *Route, def string) error {
	for _, name := range rt.cfg.Fallbacks {
		fb := r.exact[name]
		if fb == nil {
			return fmt.Errorf("model %s: unknown fallback %q", rt.name, name)
		}
		if fb != rt && !slices.Contains(rt.chain, fb) {
			rt.chain = append(rt.chain, fb)
		}
	}
	if def != "" {
		fb := r.exact[def]
		if fb == nil {
			return fmt.Errorf("routing: unknown default_fallback %q", def)
		}
		if fb != rt && fb.typ == rt.typ && !slices.Contains(rt.chain, fb) {
			rt.chain = append(rt.chain, fb)
		}
	}
	rt.hedgeable = rt.hedgeAfter > 0 || rt.hedgeP95
	if rt.hedgeable {
		n := len(rt.targets)
		for _, fb := range rt.chain {
			n += len(fb.targets)
		}
		rt.hedgeable = n > 1
	}
	return nil
}

// Lookup returns the route serving model and, for a wildcard route, the part
// of model its "*" matched; nil when no route serves model.
func (r *Router) Lookup(model string) (rt *Route, capture string) {
	if rt := r.exact[model]; rt != nil {
		return rt, ""
	}
	for _, rt := range r.wild {
		if len(model) > len(rt.prefix)+len(rt.suffix) &&
			strings.HasPrefix(model, rt.prefix) && strings.HasSuffix(model, rt.suffix) {
			return rt, model[len(rt.prefix) : len(model)-len(rt.suffix)]
		}
	}
	return nil, ""
}

// Plan starts routing one request for model. allow, when not nil, filters
// the fallback models (the gateway checks the requested model itself).
// start is when the request arrived: the retry deadline counts from it
// (zero: from the first Next). It returns nil when no route serves model.
// Nothing is chosen until Next. Release the plan when the request is over
// to reuse it (optional).
func (r *Router) Plan(model string, allow ModelFilter, start time.Time) *Plan {
	rt, capture := r.Lookup(model)
	if rt == nil {
		return nil
	}
	p, _ := r.plans.Get().(*Plan)
	if p == nil {
		p = new(Plan)
	}
	p.r, p.route, p.capture, p.allow, p.start = r, rt, capture, allow, -1
	if !start.IsZero() {
		p.start = max(0, int64(start.Sub(r.base)))
	}
	return p
}

// Routes returns the routes in config order.
func (r *Router) Routes() []*Route { return r.routes }

// nanos is the current time in nanoseconds since r.base, never negative.
func (r *Router) nanos() int64 {
	return max(0, int64(r.now().Sub(r.base)))
}

// time converts a time kept as nanoseconds since r.base.
func (r *Router) time(ns int64) time.Time { return r.base.Add(time.Duration(ns)) }

func (r *Router) notify(h *health, s State) {
	if r.onState != nil {
		r.onState(h.deployment, s)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
