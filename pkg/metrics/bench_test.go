package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkObserve is the per-request cost of recording a finished request:
// expected 0 allocs/op.
func BenchmarkObserve(b *testing.B) {
	g, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := g.Route("gpt-4o-mini", "openai", "chat")
	tests := []struct {
		name   string
		status int
		stream bool
	}{
		{"200 stream", 200, true},
		{"200", 200, false},
		{"429 refused", 429, false},
		{"418 rare", 418, false},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Observe(tt.status, 1200*time.Millisecond, 1199*time.Millisecond, 300*time.Millisecond, tt.stream)
			}
		})
	}
}

// BenchmarkRequest records what a request typically records: Observe and
// Tokens. Expected 0 allocs/op.
func BenchmarkRequest(b *testing.B) {
	g, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := g.Route("gpt-4o-mini", "openai", "chat")
	depts := []string{"engineering", "finance", "marketing", "research"}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.Observe(200, 1200*time.Millisecond, 1199*time.Millisecond, 300*time.Millisecond, true)
			g.Tokens(depts[i&3], "gpt-4o-mini", 1200, 350, 100, 0, 123456)
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				r.Observe(200, 1200*time.Millisecond, 1199*time.Millisecond, 300*time.Millisecond, true)
				g.Tokens(depts[i&3], "gpt-4o-mini", 1200, 350, 100, 0, 123456)
				i++
			}
		})
	})
}

// BenchmarkTokens is the cost of Tokens on a (dept, model) already seen:
// expected 0 allocs/op.
func BenchmarkTokens(b *testing.B) {
	g, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		g.Tokens("engineering", "gpt-4o-mini", 1200, 350, 100, 20, 123456)
	}
}
