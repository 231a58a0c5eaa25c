package ratelimit

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock safe for concurrent reads.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// step is one call in a scenario: advance the clock, then Allow or Charge.
type step struct {
	advance   time.Duration
	key       string
	rpm, tpm  int64
	tokens    int64
	charge    bool // Charge(key, tpm, tokens) instead of Allow
	wantOK    bool
	wantRetry time.Duration
}

func TestAllow(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "unlimited",
			steps: []step{
				{key: "a", wantOK: true},
				{key: "a", tokens: 1 << 40, wantOK: true},
			},
		},
		{
			name: "rpm burst then refill",
			steps: []step{
				{key: "a", rpm: 2, wantOK: true},
				{key: "a", rpm: 2, wantOK: true},
				{key: "a", rpm: 2, wantOK: false, wantRetry: 30 * time.Second},
				{advance: 10 * time.Second, key: "a", rpm: 2, wantOK: false, wantRetry: 20 * time.Second},
				{advance: 21 * time.Second, key: "a", rpm: 2, wantOK: true},
				{key: "a", rpm: 2, wantOK: false, wantRetry: 29 * time.Second},
			},
		},
		{
			name: "keys are independent",
			steps: []step{
				{key: "a", rpm: 1, wantOK: true},
				{key: "a", rpm: 1, wantOK: false, wantRetry: time.Minute},
				{key: "b", rpm: 1, wantOK: true},
			},
		},
		{
			name: "tpm",
			steps: []step{
				{key: "a", tpm: 600, tokens: 500, wantOK: true},
				{key: "a", tpm: 600, tokens: 200, wantOK: false, wantRetry: 10 * time.Second},
				{advance: 10 * time.Second, key: "a", tpm: 600, tokens: 200, wantOK: true},
				{key: "a", tpm: 600, tokens: 0, wantOK: true},
			},
		},
		{
			name: "refused request takes nothing",
			steps: []step{
				{key: "a", rpm: 10, tpm: 100, tokens: 100, wantOK: true},
				{key: "a", rpm: 10, tpm: 100, tokens: 50, wantOK: false, wantRetry: 30 * time.Second},
				{advance: 30 * time.Second, key: "a", rpm: 10, tpm: 100, tokens: 50, wantOK: true},
			},
		},
		{
			name: "both limits: the longer wait wins",
			steps: []step{
				{key: "a", rpm: 1, tpm: 60, tokens: 30, wantOK: true},
				{key: "a", rpm: 1, tpm: 60, tokens: 60, wantOK: false, wantRetry: time.Minute},
			},
		},
		{
			name: "request larger than tpm waits for a full bucket, then leaves debt",
			steps: []step{
				{key: "a", tpm: 100, tokens: 250, wantOK: true},
				{key: "a", tpm: 100, tokens: 1, wantOK: false, wantRetry: 90600 * time.Millisecond},
				{advance: 90 * time.Second, key: "a", tpm: 100, tokens: 250, wantOK: false, wantRetry: 60 * time.Second},
				{advance: 60 * time.Second, key: "a", tpm: 100, tokens: 250, wantOK: true},
			},
		},
		{
			name: "charge corrects the estimate",
			steps: []step{
				{key: "a", tpm: 100, tokens: 10, wantOK: true},
				{key: "a", tpm: 100, tokens: 80, charge: true},
				{key: "a", tpm: 100, tokens: 20, wantOK: false, wantRetry: 6 * time.Second},
				{key: "a", tpm: 100, tokens: -1000, charge: true},
				{key: "a", tpm: 100, tokens: 100, wantOK: true},
			},
		},
		{
			name: "lowered limit clamps the bucket",
			steps: []step{
				{key: "a", rpm: 100, wantOK: true},
				{key: "a", rpm: 1, wantOK: true},
				{key: "a", rpm: 1, wantOK: false, wantRetry: time.Minute},
			},
		},
		{
			name: "clock stepping back refills nothing",
			steps: []step{
				{key: "a", rpm: 1, wantOK: true},
				{advance: -time.Hour, key: "a", rpm: 1, wantOK: false, wantRetry: time.Minute},
			},
		},
	}
	// Every scenario holds as well for a gateway that shares its limits
	// but sees itself alone (N=1): today's behaviour, unchanged.
	shares := []struct {
		name  string
		share *Share
	}{{"local", nil}, {"shared N=1", &Share{}}}
	for _, sh := range shares {
		for _, tt := range tests {
			t.Run(sh.name+"/"+tt.name, func(t *testing.T) {
				clk := newClock()
				l := New(Options{Now: clk.Now, Share: sh.share})
				runSteps(t, clk, l, tt.steps)
			})
		}
	}
}

// runSteps plays steps on l and checks each Allow's answer.
func runSteps(t *testing.T, clk *fakeClock, l *Limiter, steps []step) {
	t.Helper()
	for i, s := range steps {
		clk.Advance(s.advance)
		if s.charge {
			l.Charge(s.key, s.tpm, s.tokens)
			continue
		}
		ok, retry := l.Allow(s.key, s.rpm, s.tpm, s.tokens)
		if d := retry - s.wantRetry; ok != s.wantOK || d > time.Microsecond || d < -time.Microsecond {
			t.Fatalf("step %d: Allow(%q, %d, %d, %d) = %v, %v; want %v, %v",
				i, s.key, s.rpm, s.tpm, s.tokens, ok, retry, s.wantOK, s.wantRetry)
		}
	}
}

func TestEviction(t *testing.T) {
	tests := []struct {
		name    string
		maxKeys int
		advance time.Duration // before one new key is added to every shard
		want    func(n int) bool
		wantStr string
	}{
		{name: "bounded when full", maxKeys: shardCount * 4,
			want: func(n int) bool { return n <= shardCount*4 }, wantStr: "<= 256"},
		{name: "idle keys swept", maxKeys: 1 << 20, advance: 3 * time.Minute,
			want: func(n int) bool { return n == shardCount }, wantStr: "== 64 (only the new keys)"},
		{name: "recent keys kept", maxKeys: 1 << 20, advance: 30 * time.Second,
			want: func(n int) bool { return n == 1000+shardCount }, wantStr: "== 1064"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			l := New(Options{MaxKeys: tt.maxKeys, Now: clk.Now})
			for i := range 1000 {
				l.Allow("k"+strconv.Itoa(i), 10, 0, 0)
			}
			clk.Advance(tt.advance)
			for _, k := range onePerShard(l) {
				l.Allow(k, 10, 0, 0)
			}
			if n := l.Len(); !tt.want(n) {
				t.Fatalf("Len() = %d, want %s", n, tt.wantStr)
			}
		})
	}
}

// onePerShard returns new keys, one falling in each shard of l.
func onePerShard(l *Limiter) []string {
	seen := make(map[*shard]bool)
	var keys []string
	for i := 0; len(keys) < shardCount; i++ {
		k := "new" + strconv.Itoa(i)
		if s := l.shard(k); !seen[s] {
			seen[s] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func TestEvictedKeyIsFull(t *testing.T) {
	clk := newClock()
	l := New(Options{MaxKeys: 1, Now: clk.Now})
	if ok, _ := l.Allow("a", 1, 0, 0); !ok {
		t.Fatal("first request refused")
	}
	clk.Advance(2 * time.Minute)
	l.Allow("b", 1, 0, 0) // may evict a
	if ok, _ := l.Allow("a", 1, 0, 0); !ok {
		t.Fatal("request after idle eviction refused")
	}
}

func TestConcurrentExact(t *testing.T) {
	clk := newClock() // frozen: no refill, so exactly rpm requests pass
	l := New(Options{Now: clk.Now})
	const rpm = 1000
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				if ok, _ := l.Allow("shared", rpm, 0, 0); ok {
					passed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := passed.Load(); got != rpm {
		t.Fatalf("passed %d requests, want %d", got, rpm)
	}
}

// BenchmarkAllow: 0 allocs/op expected, local or shared (the share costs
// one atomic load and two divisions).
func BenchmarkAllow(b *testing.B) {
	three := &Share{}
	three.Set(3)
	for _, keys := range []int{1, 10_000} {
		for _, sh := range []struct {
			name  string
			share *Share
		}{{"local", nil}, {"shared=3", three}} {
			b.Run(fmt.Sprintf("keys=%d/%s", keys, sh.name), func(b *testing.B) {
				benchAllow(b, keys, sh.share)
			})
		}
	}
}

func benchAllow(b *testing.B, keys int, share *Share) {
	l := New(Options{Share: share})
	names := make([]string, keys)
	for i := range names {
		names[i] = "key-" + strconv.Itoa(i)
		l.Allow(names[i], 1e9, 1e12, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Allow(names[i%keys], 1e9, 1e12, 100)
			i++
		}
	})
}
