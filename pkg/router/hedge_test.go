package router

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

func TestHedge(t *testing.T) {
	tests := []struct {
		name      string
		hedge     string
		targets   []config.Target
		fallbacks []string
		samples   int // successes of a/m, 1ms..samples ms, before the request
		wantAfter time.Duration
		wantHedge string // deployment of the hedge, "" for none
	}{
		{name: "off by default", targets: targets("a", "b")},
		{name: "fixed delay", hedge: "2s", targets: targets("a", "b"), wantAfter: 2 * time.Second, wantHedge: "b/m"},
		{name: "p95 needs samples", hedge: "p95", targets: targets("a", "b"), samples: 19},
		{name: "p95 of the target", hedge: "p95", targets: targets("a", "b"), samples: 100, wantAfter: 95 * time.Millisecond, wantHedge: "b/m"},
		{name: "p95 of recent samples only", hedge: "p95", targets: targets("a", "b"), samples: 1000, wantAfter: 994 * time.Millisecond, wantHedge: "b/m"},
		{name: "hedge on a fallback model", hedge: "2s", targets: targets("a"), fallbacks: []string{"f"}, wantAfter: 2 * time.Second, wantHedge: "c/f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, config.Routing{},
				config.Model{Name: "m", Strategy: "ordered", Targets: tt.targets, Fallbacks: tt.fallbacks, Hedge: config.Hedge{After: tt.hedge}},
				config.Model{Name: "f", Targets: targets("c")})
			for i := 1; i <= tt.samples; i++ {
				e.r.Plan("m", nil, time.Time{}).Next().Done(okDone, time.Duration(i)*time.Millisecond)
			}
			p := e.r.Plan("m", nil, time.Time{})
			if got := p.HedgeAfter(); got != 0 {
				t.Fatalf("HedgeAfter before any call = %v, want 0", got)
			}
			a := p.Next()
			a.Start()
			if got := p.HedgeAfter(); got != tt.wantAfter {
				t.Fatalf("HedgeAfter() = %v, want %v", got, tt.wantAfter)
			}
			h := p.Hedge()
			if tt.wantHedge == "" {
				if h != nil {
					t.Fatalf("hedge to %s, want none", h.Deployment())
				}
				return
			}
			if h == nil || h.Deployment() != tt.wantHedge || !h.Hedge || h.Number != 2 {
				t.Fatalf("hedge %+v, want a hedge to %s", h, tt.wantHedge)
			}
			if h == a {
				t.Fatal("the hedge reuses the attempt in flight")
			}
			h.Start()
			// The hedge wins; the first call is cancelled.
			h.Done(okDone, time.Millisecond)
			a.Done(Outcome{Class: Canceled}, 0)
			if p.HedgeAfter() != 0 || p.Hedge() != nil {
				t.Error("a second hedge was offered")
			}
			if p.Attempts() != 2 {
				t.Errorf("Attempts() = %d, want 2", p.Attempts())
			}
			if got := p.Fallbacks(); len(got) != 1 || got[0] != "a/m" {
				t.Errorf("Fallbacks() = %v, want [a/m] (the cancelled loser)", got)
			}
			for _, s := range e.r.Snapshot() {
				if s.InFlight != 0 || s.State != Closed {
					t.Errorf("%s: %d in flight, %v; want 0, closed (a cancelled call is no failure)", s.Target, s.InFlight, s.State)
				}
			}
		})
	}
}

func TestHedgeThenRetry(t *testing.T) {
	e := newEnv(t, config.Routing{Retry: config.Retry{MaxAttempts: 3}},
		config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b", "c"), Hedge: config.Hedge{After: "1s"}})
	p := e.r.Plan("m", nil, time.Time{})
	a := p.Next()
	a.Start()
	h := p.Hedge()
	h.Start()
	a.Done(ok500, 0)
	h.Done(ok500, 0)
	if !p.ShouldRetry(ok500) {
		t.Fatal("no retry after both failed")
	}
	c := p.Next()
	if c.Deployment() != "c/m" || c.Number != 3 {
		t.Fatalf("retry to %s, want c/m", c.Deployment())
	}
}

func TestP95(t *testing.T) {
	tests := []struct {
		name    string
		samples []int // ms
		want    time.Duration
	}{
		{"too few", []int{5, 5, 5}, 0},
		{"uniform 1..20", seq(1, 20), 19 * time.Millisecond},
		{"uniform 1..100", seq(1, 100), 95 * time.Millisecond},
		{"ring keeps the last 128", append(seq(1000, 1127), seq(1, 128)...), 122 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l latency
			for _, ms := range tt.samples {
				l.observe(int64(time.Duration(ms) * time.Millisecond))
			}
			if got := l.P95(); got != tt.want {
				t.Fatalf("P95() = %v, want %v", got, tt.want)
			}
		})
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}
