package router

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// benchRouter is a router with the default clock and random source.
func benchRouter(b *testing.B, m config.Model) *Router {
	b.Helper()
	cfg := &config.Config{Providers: []config.Provider{{Name: "a", Kind: "mock"}, {Name: "b", Kind: "mock"}},
		Models: []config.Model{m}}
	cfg.ApplyDefaults()
	r, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkPlan is the hot path of a request served by its first call:
// Plan, Next, Start, Done, ShouldRetry, Release. Expected allocs/op: 0
// (1 without Release).
func BenchmarkPlan(b *testing.B) {
	for _, strategy := range config.Strategies() {
		b.Run(strategy, func(b *testing.B) {
			r := benchRouter(b, config.Model{Name: "m", Strategy: strategy, Targets: targets("a", "b")})
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				start := time.Now() // the gateway's request start, read anyway
				for b.Loop() {
					planOnce(r, start)
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						planOnce(r, start)
					}
				})
			})
		})
	}
}

func planOnce(r *Router, start time.Time) {
	p := r.Plan("m", nil, start)
	a := p.Next()
	a.Start()
	a.Done(okDone, 50*time.Millisecond)
	if p.ShouldRetry(okDone) {
		panic("retry after success")
	}
	p.Release()
}

// BenchmarkPlanFallback: the first target fails with a 500, the second
// serves. Expected allocs/op: 0.
func BenchmarkPlanFallback(b *testing.B) {
	r := benchRouter(b, config.Model{Name: "m", Strategy: "ordered", Targets: targets("a", "b"),
		Retry: config.Retry{MaxAttempts: 2}})
	// A failing first target would open its circuit; keep it closed.
	r.circuit.failures = 0
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		p := r.Plan("m", nil, start)
		a := p.Next()
		a.Start()
		a.Done(ok500, 0)
		if !p.ShouldRetry(ok500) {
			b.Fatal("no retry")
		}
		a = p.Next()
		a.Start()
		a.Done(okDone, time.Millisecond)
		p.Release()
	}
}

// BenchmarkClassify: an OpenAI 429 body. Expected allocs/op: 0.
func BenchmarkClassify(b *testing.B) {
	body := []byte(`{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if Classify(429, nil, body, true).Class != RateLimited {
			b.Fatal("misclassified")
		}
	}
}
