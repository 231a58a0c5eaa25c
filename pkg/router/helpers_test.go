package router

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is a router under test with its clock, seeded random source and
// recorded sleeps and circuit transitions.
type env struct {
	r      *Router
	clock  *fakeClock
	slept  []time.Duration
	states []string
}

// newEnv builds a router for models served by providers a, b, c and d,
// with routing applied to the config before defaults.
func newEnv(t testing.TB, routing config.Routing, models ...config.Model) *env {
	t.Helper()
	cfg := &config.Config{
		Providers: []config.Provider{{Name: "a", Kind: "mock"}, {Name: "b", Kind: "mock"},
			{Name: "c", Kind: "mock"}, {Name: "d", Kind: "mock"}},
		Models:  models,
		Routing: routing,
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	e := &env{clock: newFakeClock()}
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	r, err := New(cfg, Options{
		Now:  e.clock.Now,
		Rand: func() uint64 { mu.Lock(); defer mu.Unlock(); return rng.Uint64() },
		Sleep: func(ctx context.Context, d time.Duration) error {
			e.slept = append(e.slept, d)
			e.clock.Add(d)
			return ctx.Err()
		},
		OnState: func(target string, s State) {
			mu.Lock()
			defer mu.Unlock()
			e.states = append(e.states, target+" "+s.String())
		},
	})
	if err != nil {
		t.Fatalf("new router: %v", err)
	}
	e.r = r
	return e
}

// targets builds targets on providers named by the letters of provs.
func targets(provs ...string) []config.Target {
	ts := make([]config.Target, len(provs))
	for i, p := range provs {
		ts[i] = config.Target{Provider: p}
	}
	return ts
}

var (
	ok500  = Outcome{Class: ServerError}
	okDone = Outcome{Class: Success}
)

// run plays one request: fail gives each call's outcome by the call's
// deployment (missing: success). It returns the deployments called.
func (e *env) run(t testing.TB, model string, fail func(a *Attempt) Outcome) []string {
	t.Helper()
	p := e.r.Plan(model, nil, time.Time{})
	if p == nil {
		t.Fatalf("no route for %q", model)
	}
	var got []string
	for a := p.Next(); a != nil; a = p.Next() {
		a.Start()
		got = append(got, a.Deployment())
		o := fail(a)
		a.Done(o, 10*time.Millisecond)
		if !p.ShouldRetry(o) || p.Backoff(context.Background()) != nil {
			break
		}
	}
	return got
}

// failing returns outcomes failing the named deployments with o.
func failing(o Outcome, deps ...string) func(a *Attempt) Outcome {
	return func(a *Attempt) Outcome {
		for _, d := range deps {
			if a.Deployment() == d {
				return o
			}
		}
		return okDone
	}
}
