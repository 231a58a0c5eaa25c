package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/pkg/procs"
)

// Runs with the accounting servers paused: where a target is measured
// against bareproxy on a shared load CPU, part of what tollgate pays is
// not in the gateway at all but in nats-server and the budget consumer,
// which run on the load CPU beside loadgen and mockllm (storing the usage
// batches, folding them, writing and sending the spend totals). After
// every measured run the suite runs each of pausedScenarios again on
// tollgate, as many times as it was measured, with those servers stopped
// (SIGSTOP) for each run and resumed (SIGCONT) after it: last, because
// while NATS is stopped the gateway holds its usage events in memory, and
// the measured figures of the same process (peak RSS above all) must not
// see that. The gateway still does all of its own accounting (JWT, budget
// and rate-limit checks, the usage events encoded and written to its NATS
// connection); what the runs leave out is the servers' share of the load
// CPU (and, with the budget consumer stopped, the spend totals arriving at
// the gateway). Set beside the measured figures, their median bounds what
// the servers cost on this rig. The runs are in no table but their own
// and decide no verdict.

// Accounting servers that a paused run can stop.
const (
	pauseNATS   = "nats-server"
	pauseBudget = "budget"
)

// pausedScenarios are the scenarios that get paused runs, with the
// servers each pauses. Only where the load is light: a stopped nats-server
// acknowledges no batch, so the gateway's unacknowledged batches pile up
// in its connection and its memory, more of them the higher the rate, and
// under saturating load (8 clients, streams at 64) such a run measured a
// NATS stall, not the gateway without accounting (for one build it came
// out both above and below the measured figure). Both servers at one
// client, whose window is far inside the publisher's 5 s ack timeout, so
// no batch is spooled while NATS is stopped; only the budget consumer for
// the fixed-rate CPU runs, whose longer windows would outlast that timeout
// (the gateway would then spool batches, work a normal run does not do).
// There the run shows what applying the totals costs the gateway.
var pausedScenarios = map[string][]string{
	"nonstream-c1": {pauseNATS, pauseBudget},
	"cpu-r1000":    {pauseBudget},
	"cpu-r100":     {pauseBudget},
}

// Paused is the result of a scenario's paused runs.
type Paused struct {
	Scenario string   `json:"scenario"`
	Paused   []string `json:"paused"`
	// Runs are the repetitions, Run their median; nil when one failed.
	Runs  []Run  `json:"runs,omitempty"`
	Run   *Run   `json:"median,omitempty"`
	Error string `json:"error,omitempty"`
}

// leaseWarmup is the run before a paused run that renews the lease.
const leaseWarmup = 300 * time.Millisecond

// pausedText says which servers a paused run stopped.
func (p *Paused) pausedText() string { return strings.Join(p.Paused, " and ") }

// pausedRun runs p again on tollgate, as many times as it was measured,
// with its servers stopped. A failure is reported and recorded, never
// returned, so that the suite still finishes.
func (s *suite) pausedRun(ctx context.Context, p plan) *Paused {
	pr := &Paused{Scenario: p.name, Paused: pausedScenarios[p.name]}
	fmt.Fprintf(s.out, "  extra run of %s on %s with %s paused (not measured)\n", p.name, targetTollgate, pr.pausedText())
	var stop []*procs.Proc
	for _, name := range pr.Paused {
		switch name {
		case pauseNATS:
			stop = append(stop, s.st.nats)
		case pauseBudget:
			stop = append(stop, s.st.budget)
		}
	}
	// A short run with the servers up first: the gateway's budget lease
	// expires after 30 s without traffic, and with NATS stopped a gateway
	// cannot draw a new one (it refuses after budget.leases.first_grant_wait,
	// as docs/budgets.md says), so the paused run must start on a fresh lease.
	warm := p
	warm.warmup, warm.dur = 0, leaseWarmup
	_, err := s.load(ctx, warm, targetTollgate, targetTollgate+"-before-pause", loadOpts{})
	// As many repetitions as the measured runs, for a median as steady
	// as theirs.
	for rep := 1; err == nil && rep <= s.reps; rep++ {
		var run Run
		run, err = s.load(ctx, p, targetTollgate, targetTollgate+"-paused", loadOpts{pause: stop})
		if err == nil && run.Requests == 0 {
			err = fmt.Errorf("no request answered (%d errors: %v)", run.Errors, run.ErrorsByKind)
		}
		if err == nil {
			pr.Runs = append(pr.Runs, run)
			fmt.Fprintf(s.out, "  paused, rep %d: %s\n", rep, runLine(p, run))
		}
	}
	if err != nil {
		pr.Error = err.Error()
		fmt.Fprintf(s.out, "  the paused run failed: %v\n", err)
		return pr
	}
	m := medianRun(pr.Runs)
	pr.Run = &m
	return pr
}

// pause stops each of ps and returns the function that resumes them.
func pause(ps []*procs.Proc) (resume func(), err error) {
	var stopped []*procs.Proc
	resume = func() {
		for _, p := range stopped {
			_ = p.Signal(syscall.SIGCONT)
		}
	}
	for _, p := range ps {
		if p.Exited() {
			resume()
			return nil, fmt.Errorf("pause %s: it has exited: %v", p.Name(), p.Err())
		}
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			resume()
			return nil, fmt.Errorf("pause %s: %w", p.Name(), err)
		}
		stopped = append(stopped, p)
	}
	return resume, nil
}

// pausedResult returns the paused run of scenario name, or nil.
func (r *Results) pausedResult(name string) *Paused {
	for _, p := range r.Paused {
		if p.Scenario == name {
			return p
		}
	}
	return nil
}
