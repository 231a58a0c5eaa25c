package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Verdicts of a target check.
const (
	verdictMet    = "met"
	verdictMissed = "missed"
	verdictNA     = "not measured"
)

// check is one target of the brief evaluated against a run.
type check struct {
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Verdict  string `json:"verdict"`
	// Profile names the profiled scenario that shows where the gateway's
	// CPU went for this target ("" for targets not measured on its CPU).
	Profile string `json:"profile,omitempty"`
}

// newCheck is a check of a target not measured on the gateway's CPU.
func newCheck(goal, measured, verdict string) check {
	return check{Goal: goal, Measured: measured, Verdict: verdict}
}

// profiled is c with the profiled scenario that shows its CPU.
func (c check) profiled(scenario string) check {
	c.Profile = scenario
	return c
}

// lookup finds scenario name's median on target, or nil.
func (r *Results) lookup(name, target string) *Run {
	for i := range r.Scenarios {
		if r.Scenarios[i].Name != name {
			continue
		}
		if t := r.Scenarios[i].target(target); t != nil && len(t.Runs) > 0 {
			return &t.Median
		}
	}
	return nil
}

// compare is how a figure of one target is set against another's.
type compare int

const (
	byRatio compare = iota // a / b
	byDiff                 // a - b
)

func (c compare) of(a, b float64) float64 {
	if c == byDiff {
		return a - b
	}
	return ratio(a, b)
}

// paired compares target a's figure with target b's in scenario name
// within each repetition, where the two ran back to back, and returns the
// median of those comparisons. A comparison within one repetition cancels
// the drift of the machine's speed between repetitions, which comparing
// the two medians does not: on a shared machine the same binary's
// throughput moves by a factor of two within minutes.
func (r *Results) paired(name, a, b string, val func(*Run) float64, c compare) (float64, bool) {
	for i := range r.Scenarios {
		if r.Scenarios[i].Name != name {
			continue
		}
		ta, tb := r.Scenarios[i].target(a), r.Scenarios[i].target(b)
		if ta == nil || tb == nil {
			return 0, false
		}
		var v []float64
		for j := range min(len(ta.Runs), len(tb.Runs)) {
			if x := c.of(val(&ta.Runs[j]), val(&tb.Runs[j])); !math.IsNaN(x) && !math.IsInf(x, 0) {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return 0, false
		}
		return median(v), true
	}
	return 0, false
}

// The figures the targets compare.
var (
	rpsOf     = func(x *Run) float64 { return x.RPS }
	cpuOf     = func(x *Run) float64 { return x.CPUPer1k }
	p50Of     = func(x *Run) float64 { return x.P50 }
	p99Of     = func(x *Run) float64 { return x.P99 }
	ttfcOf    = func(x *Run) float64 { return x.TTFCP50 }
	peakRSSOf = func(x *Run) float64 { return x.PeakRSSMB }
)

// startup finds the start-up result of target, or nil.
func (r *Results) startup(target string) *Startup {
	for i := range r.Startup {
		if r.Startup[i].Target == target && len(r.Startup[i].StartupMS) > 0 {
			return &r.Startup[i]
		}
	}
	return nil
}

// verdict turns a comparison into a verdict.
func verdict(ok bool) string {
	if ok {
		return verdictMet
	}
	return verdictMissed
}

// evaluate checks every target of the brief (ratios measured in this run).
func evaluate(r *Results) []check {
	var cs []check
	pair := func(name string) (tg, bp *Run) {
		return r.lookup(name, targetTollgate), r.lookup(name, targetBareproxy)
	}
	// vs is tollgate against bareproxy in scenario name, per repetition.
	vs := func(name string, val func(*Run) float64, c compare) float64 {
		x, _ := r.paired(name, targetTollgate, targetBareproxy, val, c)
		return x
	}
	na := func(goal string) { cs = append(cs, check{Goal: goal, Measured: "-", Verdict: verdictNA}) }

	for _, c := range []int{8, 32} {
		goal := fmt.Sprintf("Non-stream throughput at %d clients >= 0.85 x bareproxy", c)
		tg, bp := pair(fmt.Sprintf("nonstream-c%d", c))
		if tg == nil || bp == nil || bp.RPS == 0 {
			na(goal)
			continue
		}
		name := fmt.Sprintf("nonstream-c%d", c)
		ratio := vs(name, rpsOf, byRatio)
		cs = append(cs, newCheck(goal, fmt.Sprintf("%.2f x (%.0f vs %.0f req/s); %s", ratio, tg.RPS, bp.RPS, perRequest(tg, bp)),
			verdict(ratio >= 0.85 && tg.Errors == 0)).profiled(name))
	}
	const cpuC32 = "Serving CPU per request at 32 clients (saturated) <= 1.25 x bareproxy"
	if tg, bp := pair("nonstream-c32"); tg != nil && bp != nil && bp.CPUPer1k > 0 {
		ratio := vs("nonstream-c32", cpuOf, byRatio)
		cs = append(cs, newCheck(cpuC32, fmt.Sprintf("%.2f x (%.1f vs %.1f CPU µs)", ratio, tg.CPUPer1k*1000, bp.CPUPer1k*1000), verdict(ratio <= 1.25)).profiled("nonstream-c32"))
	} else {
		na(cpuC32)
	}
	if tg, bp := pair("nonstream-c1"); tg != nil && bp != nil {
		d50, d99 := vs("nonstream-c1", p50Of, byDiff), vs("nonstream-c1", p99Of, byDiff)
		cs = append(cs,
			newCheck("Added latency at 1 client: p50 <= bareproxy + 0.03 ms", fmt.Sprintf("%+.3f ms (%.3f vs %.3f)", d50, tg.P50, bp.P50), verdict(d50 <= 0.03)),
			newCheck("Added latency at 1 client: p99 <= bareproxy + 0.2 ms", fmt.Sprintf("%+.3f ms (%.3f vs %.3f)%s", d99, tg.P99, bp.P99, r.pausedNote("nonstream-c1", bp, p99Of, byDiff, "p99 %.3f ms")), verdict(d99 <= 0.2)).profiled("nonstream-c1"))
	} else {
		na("Added latency at 1 client")
	}
	if tg, bp := pair("stream-c64"); tg != nil && bp != nil && bp.RPS > 0 {
		ratio := vs("stream-c64", rpsOf, byRatio)
		cs = append(cs, newCheck("Streams at 64 clients >= 0.9 x bareproxy", fmt.Sprintf("%.2f x (%.0f vs %.0f streams/s); %s", ratio, tg.RPS, bp.RPS, perRequest(tg, bp)),
			verdict(ratio >= 0.9 && tg.Errors == 0)).profiled("stream-c64"))
	} else {
		na("Streams at 64 clients >= 0.9 x bareproxy")
	}
	if tg, bp := pair("stream-c1"); tg != nil && bp != nil {
		d := vs("stream-c1", ttfcOf, byDiff)
		cs = append(cs, newCheck("Time to first chunk (p50, 1 client) <= bareproxy + 0.1 ms", fmt.Sprintf("%+.3f ms (%.3f vs %.3f)", d, tg.TTFCP50, bp.TTFCP50), verdict(d <= 0.1)))
	} else {
		na("Time to first chunk <= bareproxy + 0.1 ms")
	}
	if fb, ok := r.lookup("fallback-500-c16", targetFallback), r.lookup("fallback-500-c16", targetTollgate); fb != nil && ok != nil && ok.RPS > 0 {
		ratio, _ := r.paired("fallback-500-c16", targetFallback, targetTollgate, rpsOf, byRatio)
		cs = append(cs, newCheck("Fallback after upstream 500, 16 clients: >= 0.45 x the throughput without failures", fmt.Sprintf("%.2f x (%.0f vs %.0f req/s), %d errors", ratio, fb.RPS, ok.RPS, fb.Errors), verdict(ratio >= 0.45 && fb.Errors == 0)))
	} else {
		na("Fallback after upstream 500, 16 clients: >= 0.45 x the throughput without failures")
	}
	for _, s := range r.Scenarios {
		if s.Group != groupOpen {
			continue
		}
		goal := fmt.Sprintf("Open loop %.0f req/s, 300 ms upstream: 0 errors, p99 within 10 ms of bareproxy", s.X)
		tg, bp := pair(s.Name)
		switch {
		case tg == nil || bp == nil:
			na(goal)
		case bp.Errors > 0:
			cs = append(cs, newCheck(goal, fmt.Sprintf("bareproxy does not hold this rate (%d errors)", bp.Errors), verdictNA))
		default:
			d := vs(s.Name, p99Of, byDiff)
			cs = append(cs, newCheck(goal, fmt.Sprintf("%d errors, p99 %+.2f ms (%.2f vs %.2f)", tg.Errors, d, tg.P99, bp.P99), verdict(tg.Errors == 0 && d <= 10)))
		}
	}
	for _, rate := range []int{1000, 100} {
		name := fmt.Sprintf("cpu-r%d", rate)
		goal := fmt.Sprintf("CPU per 1,000 requests at %d req/s <= 1.25 x bareproxy", rate)
		if tg, bp := pair(name); tg != nil && bp != nil && bp.CPUPer1k > 0 {
			ratio := vs(name, cpuOf, byRatio)
			cs = append(cs, newCheck(goal, fmt.Sprintf("%.2f x (%.3f vs %.3f CPU s)%s", ratio, tg.CPUPer1k, bp.CPUPer1k, r.pausedNote(name, bp, cpuOf, byRatio, "%.3f CPU s")), verdict(ratio <= 1.25)).profiled(name))
		} else {
			na(goal)
		}
	}
	const peakGoal = "Peak RSS in the open loop at 2,000 req/s, 300 ms upstream <= 1.3 x bareproxy"
	switch tg, bp := pair("open-300ms-r2000"); {
	case tg == nil || bp == nil || bp.PeakRSSMB == 0:
		na(peakGoal)
	case bp.Errors > 0:
		cs = append(cs, newCheck(peakGoal, fmt.Sprintf("bareproxy does not hold this rate (%d errors)", bp.Errors), verdictNA))
	default:
		ratio := vs("open-300ms-r2000", peakRSSOf, byRatio)
		cs = append(cs, newCheck(peakGoal, fmt.Sprintf("%.2f x (%.1f vs %.1f MiB)", ratio, tg.PeakRSSMB, bp.PeakRSSMB), verdict(ratio <= 1.3 && tg.Errors == 0)))
	}
	for _, t := range []struct {
		kb       int
		cpu, rps float64 // most CPU per request, least throughput (0: no goal), x bareproxy
	}{{64, 1.5, 0.8}, {512, 2, 0}} {
		name := fmt.Sprintf("large-%dk-c8", t.kb)
		cpuGoal := fmt.Sprintf("CPU per request with a %d KB body <= %.1f x bareproxy", t.kb, t.cpu)
		rpsGoal := fmt.Sprintf("Throughput with a %d KB body, 8 clients >= %.1f x bareproxy", t.kb, t.rps)
		tg, bp := pair(name)
		if tg == nil || bp == nil || bp.CPUPer1k == 0 || bp.RPS == 0 {
			na(cpuGoal)
			if t.rps > 0 {
				na(rpsGoal)
			}
			continue
		}
		c := vs(name, cpuOf, byRatio)
		cs = append(cs, newCheck(cpuGoal, fmt.Sprintf("%.2f x (%.3f vs %.3f CPU ms)", c, tg.CPUPer1k, bp.CPUPer1k), verdict(c <= t.cpu && tg.Errors == 0)).profiled(name))
		if t.rps > 0 {
			q := vs(name, rpsOf, byRatio)
			cs = append(cs, newCheck(rpsGoal, fmt.Sprintf("%.2f x (%.0f vs %.0f req/s)", q, tg.RPS, bp.RPS), verdict(q >= t.rps && tg.Errors == 0)).profiled(name))
		}
	}
	return append(cs, evaluateMemory(r)...)
}

// evaluateMemory checks the memory and start-up targets of the brief.
func evaluateMemory(r *Results) []check {
	var cs []check
	pair := func(name string) (tg, bp *Run) {
		return r.lookup(name, targetTollgate), r.lookup(name, targetBareproxy)
	}
	na := func(goal string) { cs = append(cs, check{Goal: goal, Measured: "-", Verdict: verdictNA}) }
	// The memory goals are in MB (10^6 bytes); RSS is measured in MiB.
	if st := r.startup(targetTollgate); st != nil {
		mb := megabytes(st.MedianRSS)
		cs = append(cs, newCheck("Idle RSS <= 20 MB", fmt.Sprintf("%.1f MB (%.1f MiB)", mb, st.MedianRSS), verdict(mb <= 20)))
	} else {
		na("Idle RSS <= 20 MB")
	}
	if st := r.startup("tollgate --embed"); st != nil {
		mb := megabytes(st.MedianRSS)
		cs = append(cs, newCheck("Idle RSS with --embed <= 64 MB", fmt.Sprintf("%.1f MB (%.1f MiB)", mb, st.MedianRSS), verdict(mb <= 64)))
	} else {
		na("Idle RSS with --embed <= 64 MB")
	}
	var per []float64
	var perText, bareText []string
	for _, n := range []int{1000, 5000} {
		tg, bp := pair(fmt.Sprintf("hold-%d", n))
		if tg != nil {
			per = append(per, megabytes(tg.RSSPer1kStreamsMB))
			perText = append(perText, fmt.Sprintf("%.1f MB at %d streams", megabytes(tg.RSSPer1kStreamsMB), n))
		}
		if bp != nil {
			bareText = append(bareText, fmt.Sprintf("%.1f MB at %d", megabytes(bp.RSSPer1kStreamsMB), n))
		}
	}
	if len(per) > 0 {
		m := strings.Join(perText, ", ")
		if len(bareText) > 0 {
			// The goal is absolute; bareproxy's own figure in the same run
			// says how much of it any Go proxy holding streams needs here.
			m += " (bareproxy: " + strings.Join(bareText, ", ") + ")"
		}
		cs = append(cs, newCheck("RSS per 1,000 concurrent streams <= 30 MB", m, verdict(slices.Max(per) <= 30)))
	} else {
		na("RSS per 1,000 concurrent streams <= 30 MB")
	}
	if st := r.startup(targetTollgate); st != nil {
		cs = append(cs, newCheck("Start-up to the first proxied response < 100 ms", fmt.Sprintf("%.1f ms", st.MedianMS), verdict(st.MedianMS < 100)))
	} else {
		na("Start-up to the first proxied response < 100 ms")
	}
	return cs
}

// ratio returns a / b, NaN when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// perRequest says where a closed-loop run's CPU went per request, tollgate
// against bareproxy: on the load CPU (loadgen and mockllm, and for tollgate
// nats-server and the budget consumer, which the usage events cost), and
// in the serving process. With the load CPU near 1.00 cores in both runs,
// the load side sets the pace, and what accounting adds to it bounds the
// ratio as much as the gateway's own CPU does.
func perRequest(tg, bp *Run) string {
	us := func(cores, rps float64) float64 { return cores / rps * 1e6 }
	return fmt.Sprintf("CPU µs per request: load CPU %.1f vs %.1f (%.2f vs %.2f cores busy; nats-server + budget %.1f of it), serving process %.1f vs %.1f",
		us(tg.LoadCores, tg.RPS), us(bp.LoadCores, bp.RPS), tg.LoadCores, bp.LoadCores, tg.AcctCPUPer1k*1000, tg.CPUPer1k*1000, bp.CPUPer1k*1000)
}

// pausedNote is the text, after a target's measured figures, of scenario
// name's run with the accounting servers paused (see paused.go): its
// figure (val, formatted with format) and that figure set against
// bareproxy's median by c. It is empty when the scenario had no such run.
func (r *Results) pausedNote(name string, bp *Run, val func(*Run) float64, c compare, format string) string {
	pr := r.pausedResult(name)
	if pr == nil || pr.Run == nil {
		return ""
	}
	if pr.Run.Errors > 0 {
		return fmt.Sprintf("; the extra runs with %s paused had %d errors, so they say nothing here", pr.pausedText(), pr.Run.Errors)
	}
	rel := fmt.Sprintf("%.2f x", c.of(val(pr.Run), val(bp)))
	if c == byDiff {
		rel = fmt.Sprintf("%+.3f ms", c.of(val(pr.Run), val(bp)))
	}
	return fmt.Sprintf("; with %s paused (extra runs, median): "+format+", %s against bareproxy's median", pr.pausedText(), val(pr.Run), rel)
}

// megabytes converts MiB, the unit RSS is measured in, to MB (10^6 bytes),
// the unit of the memory goals: 19.4 MiB is 20.3 MB.
func megabytes(mib float64) float64 { return mib * (1 << 20) / 1e6 }
