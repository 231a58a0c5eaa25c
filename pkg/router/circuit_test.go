package router

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

func TestCircuitTransitions(t *testing.T) {
	circuit := config.Circuit{Failures: 3, Cooldown: 30 * time.Second}
	type step struct {
		advance time.Duration
		outcome Class // of a call to a/m; 0 (Success) when the call succeeds
		want    string
		state   State // a/m after the step
		probe   bool  // the call is a/m's probe
	}
	tests := []struct {
		name       string
		steps      []step
		wantStates []string
	}{
		{
			name: "opens after consecutive failures, probes after cooldown, closes",
			steps: []step{
				{outcome: ServerError, want: "a/m", state: Closed},
				{outcome: Timeout, want: "a/m", state: Closed},
				{outcome: Connect, want: "a/m", state: Open},
				{want: "b/m", state: Open},
				{advance: 29 * time.Second, want: "b/m", state: Open},
				{advance: time.Second, want: "a/m", state: Closed, probe: true},
				{want: "a/m", state: Closed},
			},
			wantStates: []string{"a/m open", "a/m half_open", "a/m closed"},
		},
		{
			name: "a failed probe opens again for a cooldown",
			steps: []step{
				{outcome: ServerError, want: "a/m"}, {outcome: ServerError, want: "a/m"},
				{outcome: ServerError, want: "a/m", state: Open},
				{advance: 30 * time.Second, outcome: ServerError, want: "a/m", state: Open, probe: true},
				{advance: 29 * time.Second, want: "b/m", state: Open},
				{advance: time.Second, want: "a/m", state: Closed, probe: true},
			},
			wantStates: []string{"a/m open", "a/m half_open", "a/m open", "a/m half_open", "a/m closed"},
		},
		{
			name: "a success resets the count",
			steps: []step{
				{outcome: ServerError, want: "a/m"}, {outcome: ServerError, want: "a/m"},
				{want: "a/m"},
				{outcome: ServerError, want: "a/m"}, {outcome: ServerError, want: "a/m", state: Closed},
			},
		},
		{
			name: "client errors and refusals count as healthy",
			steps: []step{
				{outcome: ServerError, want: "a/m"}, {outcome: ServerError, want: "a/m"},
				{outcome: ClientError, want: "a/m"},
				{outcome: ServerError, want: "a/m"}, {outcome: ContextLength, want: "a/m"},
				{outcome: ServerError, want: "a/m"}, {outcome: ContentPolicy, want: "a/m", state: Closed},
			},
		},
		{
			name: "canceled calls count for nothing",
			steps: []step{
				{outcome: ServerError, want: "a/m"}, {outcome: ServerError, want: "a/m"},
				{outcome: Canceled, want: "a/m", state: Closed},
				{outcome: ServerError, want: "a/m", state: Open},
			},
			wantStates: []string{"a/m open"},
		},
		{
			name: "429 and quota are failures",
			steps: []step{
				{outcome: RateLimited, want: "a/m"}, {outcome: Quota, want: "a/m"},
				{outcome: Auth, want: "a/m", state: Open},
			},
			wantStates: []string{"a/m open"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, config.Routing{Circuit: circuit},
				config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b")})
			for i, s := range tt.steps {
				e.clock.Add(s.advance)
				p := e.r.Plan("m", nil, time.Time{})
				a := p.Next()
				if a.Deployment() != s.want || a.Probe != s.probe {
					t.Fatalf("step %d: call to %s (probe %v), want %s (probe %v)", i, a.Deployment(), a.Probe, s.want, s.probe)
				}
				o := okDone
				if a.Deployment() == "a/m" {
					o = Outcome{Class: s.outcome}
				}
				a.Start()
				a.Done(o, time.Millisecond)
				if got := e.r.Snapshot()[0].State; got != s.state {
					t.Fatalf("step %d: a/m is %v, want %v", i, got, s.state)
				}
			}
			if tt.wantStates == nil {
				tt.wantStates = []string{}
			}
			if e.states == nil {
				e.states = []string{}
			}
			if !slices.Equal(e.states, tt.wantStates) {
				t.Errorf("transitions %q, want %q", e.states, tt.wantStates)
			}
		})
	}
}

func TestCircuitOneProbe(t *testing.T) {
	e := newEnv(t, config.Routing{Circuit: config.Circuit{Failures: 1, Cooldown: 10 * time.Second}},
		config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b")})
	e.r.Plan("m", nil, time.Time{}).Next().Done(ok500, 0)
	e.clock.Add(10 * time.Second)
	probe := e.r.Plan("m", nil, time.Time{}).Next()
	if !probe.Probe || probe.Deployment() != "a/m" {
		t.Fatalf("first call after cooldown: %+v, want a/m's probe", probe)
	}
	probe.Start()
	if a := e.r.Plan("m", nil, time.Time{}).Next(); a.Deployment() != "b/m" {
		t.Fatalf("while probing: call to %s, want b/m", a.Deployment())
	}
	if s := e.r.Snapshot()[0]; s.State != HalfOpen || !s.OpenUntil.Equal(e.clock.Now().Add(10*time.Second)) {
		t.Fatalf("snapshot %+v: want half_open until the probe deadline", s)
	}
	// A probe that never reports is replaced after its deadline.
	e.clock.Add(10 * time.Second)
	if a := e.r.Plan("m", nil, time.Time{}).Next(); !a.Probe {
		t.Fatalf("after the probe deadline: %+v, want a new probe", a)
	}
	// A canceled probe hands over at once.
	e2 := newEnv(t, config.Routing{Circuit: config.Circuit{Failures: 1, Cooldown: 10 * time.Second}},
		config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b")})
	e2.r.Plan("m", nil, time.Time{}).Next().Done(ok500, 0)
	e2.clock.Add(10 * time.Second)
	e2.r.Plan("m", nil, time.Time{}).Next().Done(Outcome{Class: Canceled}, 0)
	if a := e2.r.Plan("m", nil, time.Time{}).Next(); !a.Probe {
		t.Fatalf("after a canceled probe: %+v, want a new probe", a)
	}
}

func TestCircuitAllOpen(t *testing.T) {
	e := newEnv(t, config.Routing{Circuit: config.Circuit{Failures: 1, Cooldown: time.Minute}},
		config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b")})
	e.r.Plan("m", nil, time.Time{}).Next().Done(ok500, 0)
	e.r.Plan("m", nil, time.Time{}).Next().Done(ok500, 0)
	snap := e.r.Snapshot()
	if snap[0].State != Open || snap[1].State != Open {
		t.Fatalf("snapshot %+v: want both open", snap)
	}
	p := e.r.Plan("m", nil, time.Time{})
	a := p.Next()
	if a == nil || !a.Forced || a.Deployment() != "a/m" {
		t.Fatalf("all open: %+v, want a forced call to the first target", a)
	}
	a.Done(okDone, 0)
	if s := e.r.Snapshot()[0].State; s != Closed {
		t.Fatalf("a forced call's success leaves a/m %v, want closed", s)
	}
	if got := p.Skips(); len(got) != 2 || got[0].Reason != SkipOpen {
		t.Errorf("Skips() = %+v, want both targets skipped as open", got)
	}
}

func TestCircuitSharedAcrossModels(t *testing.T) {
	e := newEnv(t, config.Routing{Circuit: config.Circuit{Failures: 2}},
		config.Model{Name: "m1", Targets: []config.Target{{Provider: "a", Model: "gpt"}}},
		config.Model{Name: "m2", Strategy: "ordered", Targets: []config.Target{{Provider: "a", Model: "gpt"}, {Provider: "b"}}})
	e.r.Plan("m1", nil, time.Time{}).Next().Done(ok500, 0)
	e.r.Plan("m1", nil, time.Time{}).Next().Done(ok500, 0)
	if a := e.r.Plan("m2", nil, time.Time{}).Next(); a.Deployment() != "b/m2" {
		t.Fatalf("m2 called %s, want b/m2: a/gpt is open for every model", a.Deployment())
	}
	if n := len(e.r.Snapshot()); n != 2 {
		t.Fatalf("snapshot has %d targets, want 2", n)
	}
}

func TestCircuitFailureRate(t *testing.T) {
	circuit := config.Circuit{Failures: -1, FailureRate: 0.5, MinRequests: 10, Window: 10 * time.Second, Cooldown: time.Minute}
	tests := []struct {
		name     string
		pattern  []bool // true: failure; one call per 100ms
		advance  time.Duration
		wantOpen bool
	}{
		{"below min requests", []bool{true, true, true, true, true, true, true, true, true}, 0, false},
		{"half fail", []bool{false, true, false, true, false, true, false, true, false, true}, 0, true},
		{"under the rate", []bool{false, false, true, false, false, true, false, false, true, false, false}, 0, false},
		{"old calls leave the window", []bool{false, false, false, false, false, false, false, false, false, false, true, true, true, true, true, true, true, true, true, true}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, config.Routing{Circuit: circuit}, config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b")})
			for i, fail := range tt.pattern {
				p := e.r.Plan("m", nil, time.Time{})
				a := p.Next()
				if a.Deployment() != "a/m" {
					t.Fatalf("call %d went to %s before the circuit should open", i, a.Deployment())
				}
				o := okDone
				if fail {
					o = ok500
				}
				a.Done(o, 0)
				if i == 9 && tt.name == "old calls leave the window" {
					e.clock.Add(11 * time.Second)
				}
				e.clock.Add(100 * time.Millisecond)
			}
			if got := e.r.Snapshot()[0].State == Open; got != tt.wantOpen {
				t.Fatalf("open = %v, want %v (snapshot %+v)", got, tt.wantOpen, e.r.Snapshot()[0])
			}
		})
	}
}

func TestPrevious(t *testing.T) {
	e := newEnv(t, config.Routing{Circuit: config.Circuit{Failures: 1}}, config.Model{Name: "m", Targets: targets("a")})
	e.r.Plan("m", nil, time.Time{}).Next().Done(ok500, 0)
	cfg := &config.Config{Providers: []config.Provider{{Name: "a", Kind: "mock"}},
		Models: []config.Model{{Name: "renamed", Targets: []config.Target{{Provider: "a", Model: "m"}}}}}
	cfg.ApplyDefaults()
	r2, err := New(cfg, Options{Now: e.clock.Now, Previous: e.r})
	if err != nil {
		t.Fatal(err)
	}
	if s := r2.Snapshot()[0]; s.Target != "a/m" || s.State != Open {
		t.Fatalf("after reload: %+v, want a/m still open", s)
	}
}

func TestConcurrentPlans(t *testing.T) {
	e := newEnv(t, config.Routing{Retry: config.Retry{MaxAttempts: 3}, Circuit: config.Circuit{Failures: 3, Cooldown: time.Millisecond}},
		config.Model{Name: "m", Strategy: "least_inflight", Targets: []config.Target{{Provider: "a", RPM: 100000}, {Provider: "b"}}, Hedge: config.Hedge{After: "p95"}})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				p := e.r.Plan("m", nil, time.Time{})
				for a := p.Next(); a != nil; a = p.Next() {
					a.Start()
					o := okDone
					if (i+g)%3 == 0 {
						o = ok500
					}
					a.Done(o, time.Duration(i)*time.Microsecond)
					_ = p.HedgeAfter()
					if !p.ShouldRetry(o) {
						break
					}
				}
				e.clock.Add(time.Microsecond)
			}
		}(g)
	}
	wg.Wait()
	for _, s := range e.r.Snapshot() {
		if s.InFlight != 0 {
			t.Errorf("%s: %d in flight after every call ended", s.Target, s.InFlight)
		}
	}
}
