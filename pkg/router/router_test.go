package router

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// TestCheckCapture checks what a wildcard route passes upstream: the
// default pattern, a configured one, and the limits no pattern lifts.
func TestCheckCapture(t *testing.T) {
	e := newEnv(t, config.Routing{},
		config.Model{Name: "gpt-4o", Targets: targets("a")},
		config.Model{Name: "open/*", Targets: targets("a")},
		config.Model{Name: "gpt/*", WildcardPattern: `gpt-[0-9a-z.-]+`, Targets: targets("a")},
		config.Model{Name: "any/*", WildcardPattern: `(?s).*`, Targets: targets("a")},
	)
	tests := []struct {
		name, model string
		ok          bool
	}{
		{"exact route", "gpt-4o", true},
		{"default: model id", "open/gpt-4.1-mini", true},
		{"default: bedrock id", "open/anthropic.claude-3-haiku-20240307-v1:0", true},
		{"default: hugging face repository", "open/meta-llama/Llama-3.1-8B-Instruct", true},
		{"default: arn", "open/arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude", true},
		{"default: dot dot", "open/../../v1/files", false},
		{"default: dot dot inside", "open/models/../files", false},
		{"default: empty segment", "open/a//b", false},
		{"default: query", "open/x?key=", false},
		{"default: fragment", "open/a#frag", false},
		{"default: percent", "open/..%2fx", false},
		{"default: space", "open/a b", false},
		{"default: non-ASCII", "open/modèle", false},
		{"default: 256 bytes", "open/" + strings.Repeat("a", 256), true},
		{"configured pattern fits", "gpt/gpt-4.1", true},
		{"configured pattern is whole-name", "gpt/gpt-4.1/x", false},
		{"configured pattern misses", "gpt/claude", false},
		{"any: slashes pass the pattern", "any/../x", true},
		{"any: control character", "any/a\r\nb", false},
		{"any: NUL", "any/a\x00b", false},
		{"any: not UTF-8", "any/a\xffb", false},
		{"any: overlong", "any/" + strings.Repeat("a", 257), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.r.Plan(tt.model, nil, time.Time{})
			if p == nil {
				t.Fatalf("Plan(%q) = nil", tt.model)
			}
			defer p.Release()
			if err := p.Route().CheckCapture(p.Capture()); (err == nil) != tt.ok {
				t.Errorf("CheckCapture(%q) = %v, want ok %v", p.Capture(), err, tt.ok)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	e := newEnv(t, config.Routing{},
		config.Model{Name: "gpt-4o", Aliases: []string{"gpt4", "smart"}, Targets: targets("a")},
		config.Model{Name: "openai/*", Targets: targets("a")},
		config.Model{Name: "openai/o*", Targets: []config.Target{{Provider: "b", Model: "reasoning-*"}}},
		config.Model{Name: "*-latest", Targets: targets("c")},
		config.Model{Name: "openai/gpt-4o-mini", Targets: targets("d")},
	)
	tests := []struct {
		name, model       string
		route, upstream   string
		deployment        string
		wantNoRoute, wild bool
	}{
		{name: "exact", model: "gpt-4o", route: "gpt-4o", upstream: "gpt-4o", deployment: "a/gpt-4o"},
		{name: "alias", model: "smart", route: "gpt-4o", upstream: "gpt-4o", deployment: "a/gpt-4o"},
		{name: "wildcard passes the suffix", model: "openai/gpt-4.1", route: "openai/*", upstream: "gpt-4.1", deployment: "a/gpt-4.1", wild: true},
		{name: "longest wildcard wins", model: "openai/o3", route: "openai/o*", upstream: "reasoning-3", deployment: "b/reasoning-3", wild: true},
		{name: "exact beats wildcard", model: "openai/gpt-4o-mini", route: "openai/gpt-4o-mini", upstream: "openai/gpt-4o-mini", deployment: "d/openai/gpt-4o-mini"},
		{name: "suffix wildcard", model: "claude-latest", route: "*-latest", upstream: "claude", deployment: "c/claude", wild: true},
		{name: "empty capture", model: "openai/", wantNoRoute: true},
		{name: "unknown", model: "llama", wantNoRoute: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.r.Plan(tt.model, nil, time.Time{})
			if tt.wantNoRoute {
				if p != nil {
					t.Fatalf("Plan(%q) routed to %s, want nil", tt.model, p.Route().Name())
				}
				return
			}
			if p == nil {
				t.Fatalf("Plan(%q) = nil", tt.model)
			}
			if p.Route().Name() != tt.route || p.Route().Wildcard() != tt.wild {
				t.Errorf("route %s (wildcard %v), want %s (%v)", p.Route().Name(), p.Route().Wildcard(), tt.route, tt.wild)
			}
			a := p.Next()
			if a.Model != tt.upstream || a.Deployment() != tt.deployment {
				t.Errorf("upstream %q at %q, want %q at %q", a.Model, a.Deployment(), tt.upstream, tt.deployment)
			}
		})
	}
}

// share runs n single-call requests and returns each deployment's share.
func share(t *testing.T, e *env, model string, n int, hold bool) map[string]float64 {
	t.Helper()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		p := e.r.Plan(model, nil, time.Time{})
		a := p.Next()
		a.Start()
		counts[a.Deployment()]++
		if !hold {
			a.Done(okDone, 0)
		}
	}
	out := map[string]float64{}
	for k, v := range counts {
		out[k] = float64(v) / float64(n)
	}
	return out
}

func TestStrategyDistribution(t *testing.T) {
	const n = 20000
	weighted := []config.Target{{Provider: "a", Weight: 3}, {Provider: "b", Weight: 1}}
	tests := []struct {
		name     string
		strategy string
		targets  []config.Target
		prepare  func(e *env)
		hold     bool // keep calls in flight
		want     map[string]float64
		tol      float64
	}{
		{name: "default is weighted with equal weights", targets: targets("a", "b", "c"),
			want: map[string]float64{"a/m": 1.0 / 3, "b/m": 1.0 / 3, "c/m": 1.0 / 3}, tol: 0.02},
		{name: "weighted 3:1", strategy: "weighted", targets: weighted,
			want: map[string]float64{"a/m": 0.75, "b/m": 0.25}, tol: 0.02},
		{name: "round robin", strategy: "round_robin", targets: targets("a", "b", "c"),
			want: map[string]float64{"a/m": 1.0 / 3, "b/m": 1.0 / 3, "c/m": 1.0 / 3}, tol: 0.0001},
		{name: "ordered", strategy: "ordered", targets: targets("a", "b"),
			want: map[string]float64{"a/m": 1}, tol: 0},
		{name: "least in flight balances held calls", strategy: "least_inflight", targets: targets("a", "b"), hold: true,
			want: map[string]float64{"a/m": 0.5, "b/m": 0.5}, tol: 0.0001},
		{name: "least in flight avoids a busy target", strategy: "least_inflight", targets: targets("a", "b"),
			prepare: func(e *env) {
				for i := 0; i < 3; i++ {
					e.r.routes[0].targets[0].h.inflight.Add(1)
				}
			},
			want: map[string]float64{"b/m": 1}, tol: 0},
		{name: "latency prefers the fast target and explores", strategy: "latency", targets: targets("a", "b"),
			prepare: func(e *env) {
				e.r.routes[0].targets[0].h.lat.observe(int64(300 * time.Millisecond))
				e.r.routes[0].targets[1].h.lat.observe(int64(100 * time.Millisecond))
			},
			// 15/16 exploit, 1/16 explore split evenly.
			want: map[string]float64{"a/m": 1.0 / 32, "b/m": 31.0 / 32}, tol: 0.01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, config.Routing{}, config.Model{Name: "m", Strategy: tt.strategy, Targets: tt.targets})
			if tt.prepare != nil {
				tt.prepare(e)
			}
			got := share(t, e, "m", n, tt.hold)
			for dep, want := range tt.want {
				if math.Abs(got[dep]-want) > tt.tol {
					t.Errorf("%s got %.4f of calls, want %.4f ± %.4f (all: %v)", dep, got[dep], want, tt.tol, got)
				}
			}
			for dep := range got {
				if _, ok := tt.want[dep]; !ok {
					t.Errorf("%s got %.4f of calls, want none", dep, got[dep])
				}
			}
		})
	}
}

func TestLatencyEWMA(t *testing.T) {
	var l latency
	l.observe(int64(100 * time.Millisecond))
	if got := time.Duration(l.ewma.Load()); got != 100*time.Millisecond {
		t.Fatalf("first sample: ewma %v, want 100ms", got)
	}
	l.observe(int64(200 * time.Millisecond))
	if got := time.Duration(l.ewma.Load()); got != 120*time.Millisecond {
		t.Fatalf("second sample: ewma %v, want 120ms (alpha 1/5)", got)
	}
}

func TestFallbackChain(t *testing.T) {
	twoTargets := func(attempts int, extra ...func(*config.Model)) config.Model {
		m := config.Model{Name: "primary", Strategy: "ordered", Targets: targets("a", "b"),
			Fallbacks: []string{"second", "third-alias"}, Retry: config.Retry{MaxAttempts: attempts}}
		for _, f := range extra {
			f(&m)
		}
		return m
	}
	models := func(primary config.Model) []config.Model {
		return []config.Model{primary,
			{Name: "second", Targets: targets("c")},
			{Name: "third", Aliases: []string{"third-alias"}, Targets: targets("d")},
			{Name: "last-resort", Targets: []config.Target{{Provider: "a", Model: "big"}}},
		}
	}
	routing := config.Routing{DefaultFallback: "last-resort"}
	tests := []struct {
		name          string
		primary       config.Model
		fail          func(a *Attempt) Outcome
		want          []string
		wantFallbacks []string
	}{
		{name: "first call serves", primary: twoTargets(0), fail: failing(ok500),
			want: []string{"a/primary"}},
		{name: "one attempt per model, then fallbacks in order", primary: twoTargets(0),
			fail: failing(ok500, "a/primary", "c/second", "d/third"),
			want: []string{"a/primary", "c/second", "d/third", "a/big"}, wantFallbacks: []string{"a/primary", "c/second", "d/third"}},
		{name: "max attempts tries the second target first", primary: twoTargets(3),
			fail: failing(ok500, "a/primary", "b/primary"),
			want: []string{"a/primary", "b/primary", "a/primary", "c/second"}},
		{name: "everything fails: every budget spent", primary: twoTargets(2),
			fail: func(*Attempt) Outcome { return ok500 },
			want: []string{"a/primary", "b/primary", "c/second", "d/third", "a/big"}},
		{name: "client errors are never retried", primary: twoTargets(3),
			fail: func(*Attempt) Outcome { return Outcome{Class: ClientError} }, want: []string{"a/primary"}},
		{name: "nothing retries once the answer started", primary: twoTargets(3),
			fail: func(*Attempt) Outcome { return Outcome{Class: ServerError, Started: true} }, want: []string{"a/primary"}},
		{name: "context length skips the model's other targets", primary: twoTargets(3),
			fail: failing(Outcome{Class: ContextLength}, "a/primary", "b/primary"),
			want: []string{"a/primary", "c/second"}},
		{name: "quota rules the target out", primary: twoTargets(3),
			fail: failing(Outcome{Class: Quota}, "a/primary"), want: []string{"a/primary", "b/primary"}},
		{name: "quota on every target moves on", primary: twoTargets(3),
			fail: failing(Outcome{Class: Quota}, "a/primary", "b/primary"), want: []string{"a/primary", "b/primary", "c/second"}},
		{name: "content policy does not fail over by default", primary: twoTargets(3),
			fail: failing(Outcome{Class: ContentPolicy}, "a/primary"), want: []string{"a/primary"}},
		{name: "content policy fails over when allowed",
			primary: twoTargets(3, func(m *config.Model) { m.FallbackOn = []string{"content_policy"} }),
			fail:    failing(Outcome{Class: ContentPolicy}, "a/primary"), want: []string{"a/primary", "c/second"}},
		{name: "no triggers, no retry",
			primary: twoTargets(3, func(m *config.Model) { m.FallbackOn = []string{} }),
			fail:    failing(ok500, "a/primary"), want: []string{"a/primary"}},
		{name: "429 not in triggers",
			primary: twoTargets(3, func(m *config.Model) { m.FallbackOn = []string{"5xx"} }),
			fail:    failing(Outcome{Class: RateLimited}, "a/primary"), want: []string{"a/primary"}},
		{name: "auth is off by default", primary: twoTargets(3),
			fail: failing(Outcome{Class: Auth}, "a/primary"), want: []string{"a/primary"}},
		{name: "canceled never retries", primary: twoTargets(3),
			fail: failing(Outcome{Class: Canceled}, "a/primary"), want: []string{"a/primary"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, routing, models(tt.primary)...)
			p := e.r.Plan("primary", nil, time.Time{})
			var got []string
			for a := p.Next(); a != nil; a = p.Next() {
				a.Start()
				got = append(got, a.Deployment())
				o := tt.fail(a)
				a.Done(o, time.Millisecond)
				if !p.ShouldRetry(o) || p.Backoff(context.Background()) != nil {
					break
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("calls %v, want %v", got, tt.want)
			}
			if p.Attempts() != len(tt.want) {
				t.Errorf("Attempts() = %d, want %d", p.Attempts(), len(tt.want))
			}
			if tt.wantFallbacks != nil && !slices.Equal(p.Fallbacks(), tt.wantFallbacks) {
				t.Errorf("Fallbacks() = %v, want %v", p.Fallbacks(), tt.wantFallbacks)
			}
		})
	}
}

func TestFallbackFlagsAndTried(t *testing.T) {
	e := newEnv(t, config.Routing{},
		config.Model{Name: "m", Targets: targets("a"), Fallbacks: []string{"f"}, FallbackOn: []string{"content_policy"}},
		config.Model{Name: "f", Targets: targets("b")})
	p := e.r.Plan("m", nil, time.Time{})
	a := p.Next()
	if a.Fallback || a.Number != 1 || a.Route != "m" {
		t.Fatalf("first call: %+v", a)
	}
	o := Outcome{Class: ContentPolicy}
	a.Done(o, 0)
	if !p.ShouldRetry(o) {
		t.Fatal("content policy reroute not allowed")
	}
	b := p.Next()
	if !b.Fallback || b.Number != 2 || b.Route != "f" {
		t.Fatalf("second call: %+v", b)
	}
	b.Done(okDone, 0)
	want := []Tried{{Route: "m", Target: "a/m", Class: ContentPolicy, Done: true}, {Route: "f", Target: "b/f", Class: Success, Done: true}}
	if got := p.Tried(); !slices.Equal(got, want) {
		t.Errorf("Tried() = %+v, want %+v", got, want)
	}
	if p.ShouldRetry(okDone) || p.Next() != nil {
		t.Error("a plan goes on after success")
	}
}

func TestFallbackFilter(t *testing.T) {
	e := newEnv(t, config.Routing{},
		config.Model{Name: "m", Targets: targets("a"), Fallbacks: []string{"expensive", "cheap"}},
		config.Model{Name: "expensive", Targets: targets("b")},
		config.Model{Name: "cheap", Targets: targets("c")})
	p := e.r.Plan("m", allowOnly{"m", "cheap"}, time.Time{})
	a := p.Next()
	a.Done(ok500, 0)
	if !p.ShouldRetry(ok500) {
		t.Fatal("no fallback")
	}
	if b := p.Next(); b.Route != "cheap" {
		t.Fatalf("fallback to %s, want cheap (expensive is not allowed)", b.Route)
	}
	want := []Skip{{Route: "expensive", Reason: SkipNotAllowed}}
	if got := p.Skips(); !slices.Equal(got, want) {
		t.Errorf("Skips() = %+v, want %+v", got, want)
	}
}

type allowOnly []string

func (a allowOnly) AllowsModel(m string) bool { return slices.Contains(a, m) }

func TestDefaultFallbackKeepsType(t *testing.T) {
	e := newEnv(t, config.Routing{DefaultFallback: "chat"},
		config.Model{Name: "chat", Targets: targets("a")},
		config.Model{Name: "other", Targets: targets("b")},
		config.Model{Name: "embed", Type: "embeddings", Targets: targets("c")})
	tests := []struct {
		model string
		want  []string
	}{
		{"other", []string{"chat"}},
		{"chat", []string{}},
		{"embed", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			rt, _ := e.r.Lookup(tt.model)
			if got := rt.Fallbacks(); !slices.Equal(got, tt.want) {
				t.Errorf("Fallbacks() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	retry := config.Retry{MaxAttempts: 7, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, Deadline: time.Minute}
	// The breaker would open after 5 failures; here it must not interfere.
	e := newEnv(t, config.Routing{Retry: retry, Circuit: config.Circuit{Failures: -1}}, config.Model{Name: "m", Targets: targets("a")})
	for i := 0; i < 200; i++ {
		e.slept = nil
		got := e.run(t, "m", func(*Attempt) Outcome { return ok500 })
		if len(got) != 7 {
			t.Fatalf("%d calls, want 7", len(got))
		}
		want := []time.Duration{100, 200, 400, 800, 1000, 1000}
		for j, d := range e.slept {
			hi := want[j] * time.Millisecond
			if d < hi/2 || d > hi {
				t.Fatalf("pause %d = %v, want within [%v, %v]", j+1, d, hi/2, hi)
			}
		}
		if len(e.slept) != len(want) {
			t.Fatalf("%d pauses, want %d", len(e.slept), len(want))
		}
	}
}

func TestBackoffOnlyForRepeats(t *testing.T) {
	e := newEnv(t, config.Routing{Retry: config.Retry{MaxAttempts: 3}},
		config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b")})
	got := e.run(t, "m", func(*Attempt) Outcome { return ok500 })
	if want := []string{"a/m", "b/m", "a/m"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	if len(e.slept) != 1 {
		t.Fatalf("pauses %v: want one, before the repeat of a/m", e.slept)
	}
}

func TestRetryAfter(t *testing.T) {
	retry := config.Retry{MaxAttempts: 3, BackoffBase: 100 * time.Millisecond, BackoffMax: 5 * time.Second, Deadline: 30 * time.Second}
	tests := []struct {
		name       string
		retryAfter time.Duration
		deadline   time.Duration
		wantCalls  int
		wantPause  time.Duration // minimum first pause
	}{
		{name: "honoured when within backoff_max", retryAfter: 2 * time.Second, wantCalls: 3, wantPause: 2 * time.Second},
		{name: "not retried when above backoff_max", retryAfter: 10 * time.Second, wantCalls: 1},
		{name: "not retried past the deadline", retryAfter: 2 * time.Second, deadline: time.Second, wantCalls: 1},
		{name: "plain backoff without it", wantCalls: 3, wantPause: 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := retry
			if tt.deadline > 0 {
				r.Deadline = tt.deadline
			}
			e := newEnv(t, config.Routing{Retry: r}, config.Model{Name: "m", Targets: targets("a")})
			got := e.run(t, "m", func(*Attempt) Outcome { return Outcome{Class: RateLimited, RetryAfter: tt.retryAfter} })
			if len(got) != tt.wantCalls {
				t.Fatalf("%d calls, want %d (pauses %v)", len(got), tt.wantCalls, e.slept)
			}
			if tt.wantPause > 0 && (len(e.slept) == 0 || e.slept[0] < tt.wantPause) {
				t.Fatalf("pauses %v, want the first at least %v", e.slept, tt.wantPause)
			}
		})
	}
}

func TestRetryAfterSkipsTargetForOthers(t *testing.T) {
	e := newEnv(t, config.Routing{}, config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b")})
	p := e.r.Plan("m", nil, time.Time{})
	p.Next().Done(Outcome{Class: RateLimited, RetryAfter: 10 * time.Second}, 0)
	if got := share(t, e, "m", 10, false); got["b/m"] != 1 {
		t.Fatalf("during Retry-After: shares %v, want all on b/m", got)
	}
	snap := e.r.Snapshot()
	if want := e.clock.Now().Add(10 * time.Second); !snap[0].RetryAfterUntil.Equal(want) {
		t.Errorf("snapshot retry_after_until %v, want %v", snap[0].RetryAfterUntil, want)
	}
	e.clock.Add(10 * time.Second)
	if got := share(t, e, "m", 10, false); got["a/m"] != 1 {
		t.Fatalf("after Retry-After: shares %v, want all on a/m", got)
	}
	// Alone, a target waiting out a Retry-After still gets the first call.
	e2 := newEnv(t, config.Routing{}, config.Model{Name: "m", Targets: targets("a")})
	e2.r.Plan("m", nil, time.Time{}).Next().Done(Outcome{Class: RateLimited, RetryAfter: 10 * time.Second}, 0)
	if a := e2.r.Plan("m", nil, time.Time{}).Next(); a == nil || !a.Forced {
		t.Fatalf("lone target under Retry-After: %+v, want a forced call", a)
	}
}

func TestDeadline(t *testing.T) {
	e := newEnv(t, config.Routing{Retry: config.Retry{MaxAttempts: 5, Deadline: 10 * time.Second}},
		config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b", "c")})
	p := e.r.Plan("m", nil, time.Time{})
	a := p.Next()
	e.clock.Add(11 * time.Second) // a slow failure
	a.Done(ok500, 0)
	if p.ShouldRetry(ok500) {
		t.Fatal("retry after the deadline")
	}
	if p.Next() != nil {
		t.Fatal("Next after ShouldRetry false")
	}
	// The deadline counts from the request's arrival when it is given.
	p = e.r.Plan("m", nil, e.clock.Now().Add(-8*time.Second))
	a = p.Next()
	e.clock.Add(2 * time.Second)
	a.Done(ok500, 0)
	if p.ShouldRetry(ok500) {
		t.Fatal("retry 10s after the request arrived")
	}
	p = e.r.Plan("m", nil, e.clock.Now().Add(-5*time.Second))
	a = p.Next()
	a.Done(ok500, 0)
	if !p.ShouldRetry(ok500) {
		t.Fatal("no retry 5s after the request arrived")
	}
}

func TestCaps(t *testing.T) {
	t.Run("rpm skips, not queues", func(t *testing.T) {
		e := newEnv(t, config.Routing{}, config.Model{Name: "m", Strategy: "ordered",
			Targets: []config.Target{{Provider: "a", RPM: 2}, {Provider: "b"}}})
		got := e.run(t, "m", failing(ok500))
		got = append(got, e.run(t, "m", failing(ok500))...)
		got = append(got, e.run(t, "m", failing(ok500))...)
		if want := []string{"a/m", "a/m", "b/m"}; !slices.Equal(got, want) {
			t.Fatalf("calls %v, want %v", got, want)
		}
		e.clock.Add(30 * time.Second) // half a minute refills one request
		if got := e.run(t, "m", failing(ok500)); !slices.Equal(got, []string{"a/m"}) {
			t.Fatalf("after 30s: calls %v, want [a/m]", got)
		}
	})
	t.Run("every target capped", func(t *testing.T) {
		e := newEnv(t, config.Routing{}, config.Model{Name: "m", Targets: []config.Target{{Provider: "a", RPM: 1}}})
		e.run(t, "m", failing(ok500))
		p := e.r.Plan("m", nil, time.Time{})
		if a := p.Next(); a != nil {
			t.Fatalf("call to %s over its cap", a.Deployment())
		}
		if !errors.Is(p.Err(), ErrAtCapacity) {
			t.Fatalf("Err() = %v, want ErrAtCapacity", p.Err())
		}
	})
	t.Run("tpm charged after the call", func(t *testing.T) {
		e := newEnv(t, config.Routing{}, config.Model{Name: "m", Strategy: "ordered",
			Targets: []config.Target{{Provider: "a", TPM: 1000}, {Provider: "b"}}})
		p := e.r.Plan("m", nil, time.Time{})
		a := p.Next()
		a.Done(okDone, 0)
		a.Charge(1500)
		if got := e.run(t, "m", failing(ok500)); !slices.Equal(got, []string{"b/m"}) {
			t.Fatalf("over tpm: calls %v, want [b/m]", got)
		}
		e.clock.Add(31 * time.Second) // 1500 tokens drain to under 1000 in 30s
		if got := e.run(t, "m", failing(ok500)); !slices.Equal(got, []string{"a/m"}) {
			t.Fatalf("after drain: calls %v, want [a/m]", got)
		}
	})
}

func TestKeyRotation(t *testing.T) {
	e := newEnv(t, config.Routing{},
		config.Model{Name: "m", Targets: []config.Target{{Provider: "a", APIKeys: []string{"k0", "k1", "k2"}}}},
		config.Model{Name: "plain", Targets: targets("a")})
	var got []string
	for i := 0; i < 4; i++ {
		a := e.r.Plan("m", nil, time.Time{}).Next()
		got = append(got, a.Key)
		if a.Key != "k"+string(rune('0'+a.KeyIndex)) {
			t.Fatalf("key %q at index %d", a.Key, a.KeyIndex)
		}
	}
	if want := []string{"k0", "k1", "k2", "k0"}; !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	if a := e.r.Plan("plain", nil, time.Time{}).Next(); a.Key != "" || a.KeyIndex != -1 {
		t.Fatalf("target without keys: key %q index %d, want the provider's", a.Key, a.KeyIndex)
	}
}

func TestSnapshotJSON(t *testing.T) {
	e := newEnv(t, config.Routing{}, config.Model{Name: "m", Targets: targets("a")})
	a := e.r.Plan("m", nil, time.Time{}).Next()
	a.Start()
	b, err := json.Marshal(e.r.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"target":"a/m"`, `"state":"closed"`, `"in_flight":1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("snapshot %s lacks %s", b, want)
		}
	}
	if strings.Contains(string(b), "open_until") {
		t.Errorf("closed circuit shows open_until: %s", b)
	}
}

func TestNewErrors(t *testing.T) {
	base := func() *config.Config {
		return &config.Config{Providers: []config.Provider{{Name: "a", Kind: "mock"}},
			Models: []config.Model{{Name: "m", Targets: targets("a")}}}
	}
	tests := []struct {
		name   string
		mutate func(c *config.Config)
		want   string
	}{
		{"unknown provider", func(c *config.Config) { c.Models[0].Targets[0].Provider = "x" }, `unknown provider "x"`},
		{"unknown fallback", func(c *config.Config) { c.Models[0].Fallbacks = []string{"x"} }, `unknown fallback "x"`},
		{"unknown default", func(c *config.Config) { c.Routing.DefaultFallback = "x" }, `unknown default_fallback "x"`},
		{"no targets", func(c *config.Config) { c.Models[0].Targets = nil }, "want 1 to 64 targets"},
		{"bad trigger", func(c *config.Config) { c.Models[0].FallbackOn = []string{"4xx"} }, `unknown fallback_on trigger "4xx"`},
		{"bad hedge", func(c *config.Config) { c.Models[0].Hedge.After = "soon" }, `hedge.after "soon"`},
		{"duplicate alias", func(c *config.Config) { c.Models[0].Aliases = []string{"m"} }, `name "m" is used twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(c)
			_, err := New(c, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	e := newEnv(t, config.Routing{Retry: config.Retry{MaxAttempts: 2}},
		config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b"), Hedge: config.Hedge{After: "1s"}})
	for i := 0; i < 3; i++ {
		p := e.r.Plan("m", nil, time.Time{})
		if p.Attempts() != 0 || p.Fallbacks() != nil || p.Skips() != nil || p.HedgeAfter() != 0 {
			t.Fatalf("round %d: a reused plan is not fresh: %d attempts", i, p.Attempts())
		}
		a := p.Next()
		a.Start()
		a.Done(ok500, 0)
		if !p.ShouldRetry(ok500) {
			t.Fatalf("round %d: no retry", i)
		}
		b := p.Next()
		b.Done(okDone, 0)
		if got := p.Fallbacks(); !slices.Equal(got, []string{"a/m"}) {
			t.Fatalf("round %d: fallbacks %v", i, got)
		}
		p.Release()
		p.Release() // harmless
	}
}
