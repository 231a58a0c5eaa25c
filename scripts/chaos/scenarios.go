package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/budget"
)

// scenario is one fault under steady load.
type scenario struct {
	name    string
	title   string
	promise string
	run     func(ctx context.Context, r *rig, res *result) error
}

// scenarios lists every scenario in run order.
func scenarios() []scenario {
	return []scenario{
		{"nats-node-kill", "one NATS node (the stream leader) SIGKILLed for 10 s, then restarted",
			"no lost or duplicated event; clients see no error", runNATSNodeKill},
		{"nats-down", "all three NATS nodes SIGKILLed for 30 s, then restarted",
			"gateways keep serving (no error), spool, drain after; no lost or duplicated event", runNATSDown},
		{"clickhouse-down", "ClickHouse stopped for 30 s, then started",
			"no client error; analytics holds back and catches up; no lost or duplicated event", runClickHouseDown},
		{"consumers-kill", "budget and analytics services SIGKILLed 3 times mid-batch, restarted each time",
			"no client error; spend totals and rows exactly once", runConsumersKill},
		{"gateway-term", "gateway-1 sent SIGTERM with 2 s streams in flight, restarted after exit",
			"streams in flight finish (no cut); events flushed; no lost or duplicated event", runGatewayTerm},
		{"gateway-kill", "gateway-1 SIGKILLed under load, restarted on the same spool",
			"lost <= streams cut by the kill + events of one sync_interval; no duplicate", runGatewayKill},
		{"gateway-kill-streams", "gateway-1 SIGKILLed with 100 long streams in flight (50 chunks 100 ms apart), restarted on the same spool",
			"every request the upstream began (mockllm's ledger) billed exactly once, those cut by the kill recovered; no duplicate", runGatewayKillStreams},
		{"upstream-faults", "upstream faults with fallbacks: slow first byte, cut mid-stream, garbage, 429 storm, connection refused",
			"slow, 429, refused and non-stream garbage served by the fallback; streams cut or garbled after their first event end with an error event (never retried); no lost or duplicated event", runUpstreamFaults},
		{"budget-overshoot", "200 concurrent clients (100 per gateway) on one dept budget",
			"overshoot <= one request's cost per gateway (budget leases; RELIABILITY.md); no lost or duplicated event", runBudgetOvershoot},
	}
}

// steadyMix is the standard load: on each gateway, 5 streams/s (8 chunks
// 20 ms apart) and 5 non-stream requests/s.
func steadyMix() []loadSpec {
	var specs []loadSpec
	for gw := range 2 {
		specs = append(specs,
			loadSpec{name: fmt.Sprintf("gw%d-stream", gw+1), gw: gw, model: "mock-gpt", stream: true, rate: 5, chunks: 8, chunkDelayMS: 20},
			loadSpec{name: fmt.Sprintf("gw%d-nonstream", gw+1), gw: gw, model: "mock-gpt", rate: 5})
	}
	return specs
}

// faultFunc injects a fault; it runs while the load runs.
type faultFunc func(ctx context.Context) error

// steady runs specs for d with fault alongside, then settles the stores
// and fills res.
func steady(ctx context.Context, r *rig, res *result, specs []loadSpec, d time.Duration, fault faultFunc) error {
	token, err := r.token(res.dept)
	if err != nil {
		return err
	}
	pubBefore := r.publisherCounts()
	rescans := r.scan.rescans
	res.since = time.Now().UTC()
	type loadDone struct {
		out outcome
		err error
	}
	done := make(chan loadDone, 1)
	go func() {
		out, err := r.runLoad(ctx, specs, token, d)
		done <- loadDone{out, err}
	}()
	ferr := fault(ctx)
	ld := <-done
	res.until = time.Now().UTC()
	res.out = ld.out
	if ferr != nil {
		return fmt.Errorf("inject fault: %w", ferr)
	}
	if ld.err != nil {
		return ld.err
	}
	if err := r.check(); err != nil {
		return err
	}
	t := time.Now()
	res.counts, err = r.settle(ctx, res.dept, res.out.Answered, 150*time.Second)
	res.note("stores settled %.0f s after the load ended", time.Since(t).Seconds())
	if n := r.scan.rescans - rescans; n > 0 {
		res.note("the usage stream's history changed below the rig's scan point %d time(s) (acknowledged messages lost, their sequences reused): the rig counted the stream again", n)
	}
	// A restarted gateway starts its counters from zero: its delta is then
	// understated, never overstated.
	pubAfter := r.publisherCounts()
	var pub []string
	for _, st := range publisherStates {
		if d := pubAfter[st] - pubBefore[st]; d > 0 {
			pub = append(pub, fmt.Sprintf("%s %d", st, d))
		}
	}
	if len(pub) > 0 {
		res.note("gateway publishers: %s", strings.Join(pub, ", "))
	}
	return err
}

// sleepUntil waits until start+at or ctx ends.
func sleepUntil(ctx context.Context, start time.Time, at time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(start.Add(at))):
		return nil
	}
}

func runNATSNodeKill(ctx context.Context, r *rig, res *result) error {
	return steady(ctx, r, res, steadyMix(), 30*time.Second, func(ctx context.Context) error {
		start := time.Now()
		if err := sleepUntil(ctx, start, 5*time.Second); err != nil {
			return err
		}
		victim := r.nats[1]
		if s, err := r.js.Stream(ctx, budget.Stream); err == nil && s.CachedInfo().Cluster != nil {
			for _, n := range r.nats {
				if n.name == s.CachedInfo().Cluster.Leader {
					victim = n
				}
			}
		}
		res.note("killed %s (usage stream leader)", victim.name)
		if err := sigkill(victim.p); err != nil {
			return err
		}
		if err := sleepUntil(ctx, start, 15*time.Second); err != nil {
			return err
		}
		t := time.Now()
		if err := r.restartNATS(ctx, victim); err != nil {
			return err
		}
		res.note("%s healthy again %.1f s after restart", victim.name, time.Since(t).Seconds())
		return nil
	})
}

func runNATSDown(ctx context.Context, r *rig, res *result) error {
	return steady(ctx, r, res, steadyMix(), 55*time.Second, func(ctx context.Context) error {
		start := time.Now()
		if err := sleepUntil(ctx, start, 5*time.Second); err != nil {
			return err
		}
		for _, n := range r.nats {
			if err := sigkill(n.p); err != nil {
				return err
			}
		}
		if err := sleepUntil(ctx, start, 35*time.Second); err != nil {
			return err
		}
		t := time.Now()
		if err := r.restartNATS(ctx, r.nats[:]...); err != nil {
			return err
		}
		res.note("cluster healthy %.1f s after restart", time.Since(t).Seconds())
		return nil
	})
}

func runClickHouseDown(ctx context.Context, r *rig, res *result) error {
	return steady(ctx, r, res, steadyMix(), 50*time.Second, func(ctx context.Context) error {
		start := time.Now()
		if err := sleepUntil(ctx, start, 5*time.Second); err != nil {
			return err
		}
		if err := r.ch.Stop(); err != nil {
			return err
		}
		if err := sleepUntil(ctx, start, 35*time.Second); err != nil {
			return err
		}
		return r.ch.Start()
	})
}

func runConsumersKill(ctx context.Context, r *rig, res *result) error {
	return steady(ctx, r, res, steadyMix(), 30*time.Second, func(ctx context.Context) error {
		start := time.Now()
		for i, at := range []time.Duration{4 * time.Second, 10 * time.Second, 16 * time.Second} {
			if err := sleepUntil(ctx, start, at); err != nil {
				return err
			}
			if err := sigkill(r.budget); err != nil {
				return err
			}
			if err := sigkill(r.analytic); err != nil {
				return err
			}
			if err := sleepUntil(ctx, start, at+time.Second); err != nil {
				return err
			}
			if err := r.startBudget(); err != nil {
				return err
			}
			if err := r.startAnalytics(); err != nil {
				return err
			}
			res.note("kill %d at %.0f s", i+1, at.Seconds())
		}
		return nil
	})
}

// longStreams is the load of the gateway scenarios: 2 s streams (20 chunks
// 100 ms apart), so several are in flight when the signal lands.
func longStreams() []loadSpec {
	specs := steadyMix()
	for i := range specs {
		if specs[i].stream {
			specs[i].chunks, specs[i].chunkDelayMS = 20, 100
		}
	}
	return specs
}

func runGatewayTerm(ctx context.Context, r *rig, res *result) error {
	err := steady(ctx, r, res, longStreams(), 20*time.Second, func(ctx context.Context) error {
		start := time.Now()
		if err := sleepUntil(ctx, start, 5*time.Second); err != nil {
			return err
		}
		g := r.gws[0]
		t := time.Now()
		if err := sigterm(g.p); err != nil {
			return err
		}
		if !g.p.Wait(shutdownGrace + 20*time.Second) {
			return fmt.Errorf("%s did not exit after SIGTERM", g.name)
		}
		res.note("gateway-1 exited %.2f s after SIGTERM (grace %s)", time.Since(t).Seconds(), shutdownGrace)
		return r.startGateway(ctx, g)
	})
	if err != nil {
		return err
	}
	if rep := res.out.ByLoad["gw1-stream"]; rep != nil {
		res.cut = rep.ErrorsByKind["cut"] + rep.ErrorsByKind["no_done"] + rep.ErrorsByKind["error_event"]
	}
	return nil
}

func runGatewayKill(ctx context.Context, r *rig, res *result) error {
	err := steady(ctx, r, res, longStreams(), 20*time.Second, func(ctx context.Context) error {
		start := time.Now()
		if err := sleepUntil(ctx, start, 5*time.Second); err != nil {
			return err
		}
		g := r.gws[0]
		if err := sigkill(g.p); err != nil {
			return err
		}
		if err := sleepUntil(ctx, start, 6*time.Second); err != nil {
			return err
		}
		return r.startGateway(ctx, g)
	})
	if err != nil {
		return err
	}
	if rep := res.out.ByLoad["gw1-stream"]; rep != nil {
		res.cut = rep.ErrorsByKind["cut"] + rep.ErrorsByKind["no_done"]
	}
	// Events of requests that ended within one sync interval of the kill
	// could at worst have been neither published nor fsynced.
	rate := 0.0
	for _, s := range longStreams() {
		if s.gw == 0 {
			rate += s.rate
		}
	}
	res.lostBound = res.cut + int64(math.Ceil(rate*syncInterval.Seconds()))
	res.boundText = fmt.Sprintf("<= %d (cut streams %d + %g req/s x %s)", res.lostBound, res.cut, rate, syncInterval)
	return nil
}

// runGatewayKillStreams: 100 clients on gateway-1, each streaming two
// 5-second answers in turn; gateway-1 is SIGKILLed 6 s in (the second
// answers about a second old, each with a begun record and a progress
// record) and restarted on its spool a second later. The restarted
// gateway publishes a recovered event for each stream it was relaying, so
// the stream holds one event for every request mockllm began: those it
// completed and those the kill cut (its ledger's incomplete streams).
func runGatewayKillStreams(ctx context.Context, r *rig, res *result) error {
	specs := []loadSpec{{name: "gw1-long", gw: 0, model: "mock-gpt", stream: true, clients: 100, limit: 200, chunks: 50, chunkDelayMS: 100}}
	err := steady(ctx, r, res, specs, 30*time.Second, func(ctx context.Context) error {
		start := time.Now()
		if err := sleepUntil(ctx, start, 6*time.Second); err != nil {
			return err
		}
		g := r.gws[0]
		if err := sigkill(g.p); err != nil {
			return err
		}
		if err := sleepUntil(ctx, start, 7*time.Second); err != nil {
			return err
		}
		return r.startGateway(ctx, g)
	})
	if err != nil {
		return err
	}
	if rep := res.out.ByLoad["gw1-long"]; rep != nil {
		res.cut = rep.ErrorsByKind["cut"] + rep.ErrorsByKind["no_done"]
	}
	l, err := r.mockLedger(ctx)
	if err != nil {
		return err
	}
	res.began = l.WithoutUsage + l.Incomplete + l.Overflow
	for _, a := range l.Answers {
		res.began += a.Count
	}
	res.checkBegan = true
	res.note("mockllm began %d (completed %d, cut %d); %d events recovered, %d streams cut at the client",
		res.began, res.began-l.Incomplete, l.Incomplete, res.counts.StreamRecovered, res.cut)
	return nil
}

func runUpstreamFaults(ctx context.Context, r *rig, res *result) error {
	var specs []loadSpec
	for i, m := range []string{"chaos-slow", "chaos-cut", "chaos-garbage", "chaos-429", "chaos-refused"} {
		specs = append(specs,
			loadSpec{name: m + "-stream", gw: i % 2, model: m, stream: true, rate: 2, chunks: 8, chunkDelayMS: 20},
			loadSpec{name: m + "-nonstream", gw: (i + 1) % 2, model: m, rate: 2})
	}
	err := steady(ctx, r, res, specs, 20*time.Second, func(context.Context) error { return nil })
	if err != nil {
		return err
	}
	// mockllm sends the role chunk before cutting or garbling a stream, so
	// those fail after the first byte: an error event, by design.
	for name, rep := range res.out.ByLoad {
		if name == "chaos-cut-stream" || name == "chaos-garbage-stream" {
			res.unexpectedErrors += rep.Errors - rep.ErrorsByKind["error_event"]
			continue
		}
		res.unexpectedErrors += rep.Errors
	}
	return nil
}

func runBudgetOvershoot(ctx context.Context, r *rig, res *result) error {
	const clients, latencyMS = 100, 50
	specs := []loadSpec{
		{name: "gw1-clients", gw: 0, model: "mock-gpt", clients: clients, limit: 600, maxTokens: 16, latencyMS: latencyMS},
		{name: "gw2-clients", gw: 1, model: "mock-gpt", clients: clients, limit: 600, maxTokens: 16, latencyMS: latencyMS},
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var prop propagation
	key := budget.TotalID{Scope: budget.ScopeDept, Value: budgetDept, Period: budget.PeriodTotal}.Key()
	if err := prop.watch(wctx, r, key); err != nil {
		return err
	}
	if err := steady(ctx, r, res, specs, 20*time.Second, func(context.Context) error { return nil }); err != nil {
		return err
	}
	stopWatch()
	// With budget leases (on by default) the gateways together never admit
	// past the limit; what is left is settle excess, a request costing more
	// than its reservation (the prompt is estimated from the body size far
	// from the limit). The target bound is one request's cost per gateway.
	// P, the propagation delay, no longer enters the bound: it is reported
	// because without leases the overshoot grew with it.
	p, updates := prop.result()
	const gateways = 2
	res.overshoot = res.counts.StreamCost - budgetLimitNano
	res.overshootBound = gateways * res.counts.StreamMaxCost
	res.note("spend %d of %d nano-USD: overshoot %d (%.1f%% of the limit)", res.counts.StreamCost, budgetLimitNano,
		max(res.overshoot, 0), 100*float64(max(res.overshoot, 0))/budgetLimitNano)
	res.note("bound %d = %d gateways x one request's cost (largest %d nano-USD); P %s", res.overshootBound,
		gateways, res.counts.StreamMaxCost, p.Round(time.Millisecond))
	res.note("P is the largest delay of %d spend-total updates, stream store to KV watch", updates)
	if s := res.counts.SpentAtFirstRefusal; s >= 0 {
		res.note("first refusal with %d nano-USD spent by ended requests (%.1f%% of the limit)", s, 100*float64(s)/budgetLimitNano)
		if b := res.counts.FirstRefusal; b != nil {
			res.note("the refusing gateway could admit %d more (the limit less spend, worst-case reservations in flight and the other gateway's slice); the request's worst case was %d",
				b.GetHeadroomNanoUsd(), b.GetReservedNanoUsd())
		}
	} else {
		res.note("no request was refused")
	}
	return nil
}
