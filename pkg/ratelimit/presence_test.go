package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tollgate/tollgate/pkg/natstest"

	"github.com/tollgate/tollgate/pkg/testkit"
)

const testTTL = 600 * time.Millisecond

// gw is one gateway's presence, on its own NATS connection.
type gw struct {
	nc     *nats.Conn
	kv     jetstream.KeyValue
	p      *Presence
	cancel context.CancelFunc
	done   chan error
}

// startGateway announces a gateway on its own connection to s and runs it
// until stop (or the test's end). Its presence ages other gateways'
// announcements on clk (nil: the wall clock).
func startGateway(t *testing.T, s *server.Server, clk *fakeClock) *gw {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := EnsurePresenceBucket(ctx, js, 1, testTTL)
	if err != nil {
		t.Fatal(err)
	}
	o := PresenceOptions{TTL: testTTL}
	if clk != nil {
		o.Now = clk.Now
	}
	p, err := StartPresence(ctx, kv, o)
	if err != nil {
		t.Fatal(err)
	}
	g := &gw{nc: nc, kv: kv, p: p, cancel: cancel, done: make(chan error, 1)}
	go func() { g.done <- p.Run(ctx) }()
	t.Cleanup(func() { g.stop() })
	return g
}

// stop ends the gateway's Run and returns its error (nil if already stopped).
func (g *gw) stop() error {
	if g.cancel == nil {
		return nil
	}
	g.cancel()
	g.cancel = nil
	return <-g.done
}

// renewed waits until g has announced itself n more times: after the
// second, g has counted the gateways again at least once since the call.
func (g *gw) renewed(t *testing.T, n int) {
	t.Helper()
	rev := func() uint64 {
		e, err := g.kv.Get(context.Background(), g.p.ID())
		if err != nil {
			t.Fatalf("read own presence entry: %v", err)
		}
		return e.Revision()
	}
	last := rev()
	deadline := time.Now().Add(5 * time.Second)
	for n > 0 {
		if r := rev(); r != last {
			last = r
			n--
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not renew its entry within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitGateways waits until every gateway sees n gateways.
func waitGateways(t *testing.T, n int64, within time.Duration, gws ...*gw) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok := true
		for _, g := range gws {
			ok = ok && g.p.Share().Gateways() == n
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for i, g := range gws {
				t.Logf("gateway %d sees %d", i, g.p.Share().Gateways())
			}
			t.Fatalf("gateways do not all see %d within %s", n, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSharedLimitHoldsAcrossGateways(t *testing.T) {
	s := natstest.Start(t)
	const n = 3
	var gws []*gw
	for range n {
		gws = append(gws, startGateway(t, s, nil))
	}
	waitGateways(t, n, 5*time.Second, gws...)

	tests := []struct {
		name                  string
		rpm, tpm, tokens      int64
		wantReqs, maxReqs     int64 // admitted in total: exactly, and the bound
		wantTokens, maxTokens int64
	}{
		// 10/3 per gateway: 3 each, 9 in all.
		{name: "rpm above N", rpm: 10, wantReqs: 9, maxReqs: 10},
		{name: "rpm divisible", rpm: 30, wantReqs: 30, maxReqs: 30},
		// A share below one request: each gateway passes one request
		// (then owes it), so the rounding is one request per gateway.
		{name: "rpm below N", rpm: 2, wantReqs: 3, maxReqs: 2 + n},
		// 1000/3 tokens per gateway, 100 a request: 3 each.
		{name: "tpm", tpm: 1000, tokens: 100, wantReqs: 9, wantTokens: 900, maxTokens: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock() // frozen: one window's capacity, no refill
			var reqs, tokens int64
			for _, g := range gws {
				l := New(Options{Now: clk.Now, Share: g.p.Share()})
				for range 100 {
					if ok, _ := l.Allow("team-a", tt.rpm, tt.tpm, tt.tokens); ok {
						reqs++
						tokens += tt.tokens
					}
				}
			}
			if reqs != tt.wantReqs || tt.maxReqs > 0 && reqs > tt.maxReqs {
				t.Errorf("admitted %d requests, want %d (bound %d)", reqs, tt.wantReqs, tt.maxReqs)
			}
			if tokens != tt.wantTokens || tt.maxTokens > 0 && tokens > tt.maxTokens {
				t.Errorf("admitted %d tokens, want %d (bound %d)", tokens, tt.wantTokens, tt.maxTokens)
			}
		})
	}

	t.Run("refill divided too", func(t *testing.T) {
		clk := newClock()
		var ls []*Limiter
		for _, g := range gws {
			ls = append(ls, New(Options{Now: clk.Now, Share: g.p.Share()}))
		}
		var reqs int64
		for range 60 { // one minute, a second at a time, after the initial burst
			for _, l := range ls {
				for range 10 {
					if ok, _ := l.Allow("team-a", 30, 0, 0); ok {
						reqs++
					}
				}
			}
			clk.Advance(time.Second)
		}
		// 30 of capacity plus 30 refilled in the minute (the last second's
		// refill is not asked for).
		if reqs > 60 || reqs < 55 {
			t.Errorf("admitted %d requests in a minute under rpm 30, want 55..60", reqs)
		}
	})
}

// TestGatewayLeavingGivesShareBack: a gateway that stops is dropped at
// once, one that dies only once its TTL has passed. The presences age
// entries on a test clock that moves only when the test moves it, so the
// dead gateway's TTL cannot pass while the test looks.
func TestGatewayLeavingGivesShareBack(t *testing.T) {
	s := natstest.Start(t)
	clk := newClock()
	a, b, c := startGateway(t, s, clk), startGateway(t, s, clk), startGateway(t, s, clk)
	waitGateways(t, 3, 5*time.Second, a, b, c)

	// A gateway that stops deletes its entry: the others see it although
	// no time passed on their clock.
	if err := c.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	waitGateways(t, 2, 5*time.Second, a, b)

	// One that dies leaves its entry: it counts until its TTL has passed.
	b.nc.Close()
	if err := b.stop(); err == nil {
		t.Fatal("a gateway without NATS deleted its entry")
	}
	a.renewed(t, 2)
	if got := a.p.Share().Gateways(); got != 2 {
		t.Fatalf("a dead gateway was dropped before its TTL: N = %d", got)
	}
	clk.Advance(testTTL + testTTL/3)
	waitGateways(t, 1, 5*time.Second, a)

	// Alone again: exactly the local limits.
	lclk := newClock()
	l := New(Options{Now: lclk.Now, Share: a.p.Share()})
	for i := range 5 {
		if ok, _ := l.Allow("k", 5, 0, 0); !ok {
			t.Fatalf("request %d of 5 refused with N=1", i+1)
		}
	}
	if ok, retry := l.Allow("k", 5, 0, 0); ok || retry != 12*time.Second {
		t.Fatalf("sixth request = %v, retry %s; want refused, 12s", ok, retry)
	}
}

func TestPresenceKeepsLastCountWithoutNATS(t *testing.T) {
	s := natstest.Start(t)
	clk := newClock()
	a, b := startGateway(t, s, clk), startGateway(t, s, clk)
	waitGateways(t, 2, 5*time.Second, a, b)

	s.Shutdown()
	s.WaitForShutdown()
	errs := func(g *gw, n uint64) {
		testkit.Wait(t, 5*time.Second, fmt.Sprintf("%d failed announcements with NATS down", n), func() bool { return g.p.Errors() >= n })
	}
	errs(a, 1)
	errs(b, 1)
	if !a.p.Stale() || !b.p.Stale() {
		t.Fatal("presence not stale with NATS down")
	}
	// Several TTLs without any renewal; then two more failed renewals
	// each, so that each gateway has counted again since.
	clk.Advance(3 * testTTL)
	errs(a, a.p.Errors()+2)
	errs(b, b.p.Errors()+2)
	for i, g := range []*gw{a, b} {
		if got := g.p.Share().Gateways(); got != 2 {
			t.Errorf("gateway %d: N = %d with NATS down, want the last known 2", i, got)
		}
		if g.p.Errors() == 0 {
			t.Errorf("gateway %d: no announcement error counted", i)
		}
	}

	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg, a.p); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if m.GetGauge() != nil {
			got[mf.GetName()] = m.GetGauge().GetValue()
		} else {
			got[mf.GetName()] = m.GetCounter().GetValue()
		}
	}
	if got["tollgate_ratelimit_gateways"] != 2 || got["tollgate_ratelimit_presence_stale"] != 1 || got["tollgate_ratelimit_presence_errors_total"] < 1 {
		t.Errorf("metrics = %v", fmt.Sprint(got))
	}
}
