package main

import (
	"bytes"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"time"
)

// namedChart is a chart and its file name.
type namedChart struct {
	file  string
	alt   string
	chart barChart
}

// charts builds the charts of r.
func charts(r *Results) []namedChart {
	var out []namedChart
	bySeries := func(group string, label func(Scenario) string, value func(*Run) float64, targets []string) ([]string, []series) {
		var groups []string
		ss := make([]series, len(targets))
		for i, t := range targets {
			ss[i] = series{name: t, color: targetColor(t)}
		}
		for _, sc := range r.Scenarios {
			if sc.Group != group {
				continue
			}
			groups = append(groups, label(sc))
			for i, t := range targets {
				v := math.NaN()
				if tr := sc.target(t); tr != nil && len(tr.Runs) > 0 {
					v = value(&tr.Median)
				}
				ss[i].values = append(ss[i].values, v)
			}
		}
		return groups, ss
	}
	clients := func(sc Scenario) string {
		l := fmt.Sprintf("%.0f %s", sc.X, plural(int(sc.X), "client"))
		if strings.Contains(sc.Name, "paced") {
			l += ", paced"
		}
		return l
	}
	if g, s := bySeries(groupNonStream, clients, rpsOf, allTargets()); len(g) > 0 {
		out = append(out, namedChart{"nonstream-rps.svg", "Non-stream requests per second by client count",
			barChart{title: "Non-stream throughput (instant upstream, 200-word prompt)", yLabel: "requests/s", groups: g, series: s}})
	}
	if g, s := bySeries(groupStream, clients, rpsOf, allTargets()); len(g) > 0 {
		out = append(out, namedChart{"stream-rps.svg", "Streams per second by client count",
			barChart{title: "Stream throughput (50 chunks each)", yLabel: "streams/s", groups: g, series: s}})
	}
	for _, name := range []string{"nonstream-c1", "nonstream-c32"} {
		var sc *Scenario
		for i := range r.Scenarios {
			if r.Scenarios[i].Name == name {
				sc = &r.Scenarios[i]
			}
		}
		if sc == nil {
			continue
		}
		groups := []string{"p50", "p90", "p99", "p99.9"}
		var ss []series
		for _, t := range allTargets() {
			tr := sc.target(t)
			if tr == nil {
				continue
			}
			m := tr.Median
			ss = append(ss, series{name: t, color: targetColor(t), values: []float64{m.P50, m.P90, m.P99, m.P999}})
		}
		out = append(out, namedChart{"latency-" + strings.TrimPrefix(name, "nonstream-") + ".svg", "Latency percentiles, " + sc.Title,
			barChart{title: "Latency percentiles: " + sc.Title, yLabel: "ms", groups: groups, series: ss}})
	}
	rate := func(sc Scenario) string { return fmt.Sprintf("%.0f req/s", sc.X) }
	if g, s := bySeries(groupOpen, rate, func(x *Run) float64 { return x.P99 }, allTargets()); len(g) > 0 {
		out = append(out, namedChart{"open-loop-p99.svg", "Open loop p99 latency by request rate",
			barChart{title: "Open loop with a 300 ms upstream: p99 latency", yLabel: "ms (from intended send time)", groups: g, series: s}})
	}
	if len(r.Startup) > 0 {
		streams := func(sc Scenario) string { return fmt.Sprintf("%.0f streams", sc.X) }
		g, s := bySeries(groupHold, streams, func(x *Run) float64 { return x.RSSEndMB }, []string{targetBareproxy, targetTollgate})
		g = append([]string{"idle"}, g...)
		for i := range s {
			idle := math.NaN()
			if st := r.startup(s[i].name); st != nil {
				idle = st.MedianRSS
			}
			s[i].values = append([]float64{idle}, s[i].values...)
		}
		if st := r.startup("tollgate --embed"); st != nil {
			vals := make([]float64, len(g))
			for i := range vals {
				vals[i] = math.NaN()
			}
			vals[0] = st.MedianRSS
			s = append(s, series{name: "tollgate --embed", color: "#59a14f", values: vals})
		}
		out = append(out, namedChart{"memory.svg", "Resident memory idle and with concurrent slow streams",
			barChart{title: "Resident memory (RSS)", yLabel: "MiB", groups: g, series: s}})
	}
	return out
}

// md accumulates markdown.
type md struct{ bytes.Buffer }

func (m *md) p(format string, a ...any) { fmt.Fprintf(&m.Buffer, format, a...) }

// row writes one table row.
func (m *md) row(cells ...string) { m.p("| %s |\n", strings.Join(cells, " | ")) }

// header writes a table header.
func (m *md) header(cells ...string) {
	m.row(cells...)
	sep := make([]string, len(cells))
	for i := range sep {
		sep[i] = "---"
	}
	m.row(sep...)
}

// Number formats for tables.
func ms3(v float64) string { return fmt.Sprintf("%.3f", v) }
func ms2(v float64) string { return fmt.Sprintf("%.2f", v) }
func n0(v float64) string  { return fmt.Sprintf("%.0f", v) }

// times formats a ratio, or "-" when there is none.
func times(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f×", v)
}

// delta formats a difference in milliseconds.
func delta(v float64) string { return fmt.Sprintf("%+.3f", v) }

// errText formats error counts, with their kinds.
func errText(r *Run) string {
	if r.Errors == 0 {
		return "0"
	}
	var kinds []string
	for k, n := range r.ErrorsByKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	return fmt.Sprintf("**%d** (%s)", r.Errors, strings.Join(kinds, ", "))
}

// render writes BENCHMARKS.md. chartDir is the charts' directory relative
// to the markdown file; soak may be nil.
func render(r *Results, soak *Soak, chartDir string) []byte {
	var m md
	m.p("# Benchmarks\n\n")
	m.p("Tollgate measured against a bare Go reverse proxy and against direct calls to an instant mock upstream, in one run, with Tollgate's full request path switched on (JWT verification, budget and rate-limit checks, usage events to a real NATS JetStream server). ")
	m.p("Every program is built as the release image builds it (static, `CGO_ENABLED=0 go build -trimpath -ldflags='-s -w'`). ")
	m.p("This file is generated by `make bench` (%s, commit `%s`); do not edit it by hand. ", r.Finished.UTC().Format("2006-01-02 15:04 UTC"), r.Machine.Commit)
	m.p("The figures are in [%s](%s).\n\n", path.Join(chartDir, "latest.json"), path.Join(chartDir, "latest.json"))

	m.p("## Headline\n\n")
	headline(&m, r)
	m.p("\n## Targets\n\n")
	cs := evaluate(r)
	met, measured := 0, 0
	m.header("Target (ratios within this run)", "Measured", "Verdict", "Gateway CPU profile")
	for _, c := range cs {
		v := c.Verdict
		switch v {
		case verdictMet:
			met++
			measured++
			v = "met"
		case verdictMissed:
			measured++
			v = "**missed**"
		}
		prof := "-"
		if pr := r.profile(c.Profile); pr != nil && pr.File != "" {
			f := path.Join(chartDir, pr.File)
			prof = fmt.Sprintf("[%s](%s)", pr.Scenario, f)
		}
		m.row(c.Goal, c.Measured, v, prof)
	}
	m.p("\n%d of %d measured targets met. A target compared with bareproxy on throughput, latency or CPU links the gateway's CPU profile of the scenario that measured it (see [Gateway CPU profiles](#gateway-cpu-profiles)), and those measured at light load give the figure of extra runs with the accounting servers paused (see [Runs with the accounting servers paused](#runs-with-the-accounting-servers-paused)): where a target is missed, the profile shows where the gateway's CPU goes, and the paused runs how much of the difference is nats-server and the budget consumer working on the load CPU. ", met, measured)
	perf := path.Join(path.Dir(chartDir), "performance.md")
	m.p("[%s](%s), kept by hand, reads these figures for the commit it names: where each missed target's difference goes, and what is left to do.\n\n", perf, perf)

	m.p("## Charts\n\n")
	for _, c := range charts(r) {
		m.p("![%s](%s)\n\n", c.alt, path.Join(chartDir, c.file))
	}

	method(&m, r)
	machine(&m, r)

	m.p("## Results\n\n")
	m.p("Medians over %d repetitions; errors are summed over all repetitions. Latency is in milliseconds, from the send time (closed loop) or the intended send time (open loop) to the last byte. ", r.Settings.Reps)
	m.p("\"× bareproxy\" and \"× direct\" divide the row's figure by that target's; \"Δ\" columns subtract that target's figure from the row's. \"CPU\" is the serving process's CPU in cores over the window (mockllm for direct); \"load CPU\" is everything on the load CPU (loadgen, mockllm and, for tollgate, nats-server and the budget consumer): near 1.00 the load side, not the process under test, sets the pace.\n\n")
	closedTable(&m, r, groupNonStream, "Non-stream, instant upstream, 200-word prompt", false)
	closedTable(&m, r, groupStream, "Streams of 50 chunks, instant upstream (paced: 5 ms between chunks)", true)
	closedTable(&m, r, groupPayload, "Large payloads: 64 KB conversation history and 1,536-dimension embeddings, 32 clients", false)
	largeTable(&m, r)
	fallbackTable(&m, r)
	openTable(&m, r)
	cpuTable(&m, r)
	memoryTable(&m, r)
	startupTable(&m, r)
	if len(r.Pending) > 0 {
		m.p("### Pending scenarios\n\n")
		for _, p := range r.Pending {
			m.p("- **%s**: %s\n", p.Name, p.Reason)
		}
		m.p("\n")
	}
	soakSection(&m, soak)
	goBenchSection(&m, r.GoBench)
	profileSection(&m, r.Profiles, chartDir)
	pausedSection(&m, r)
	if len(r.Notes) > 0 {
		m.p("## Notes on this run\n\n")
		for _, n := range r.Notes {
			m.p("- %s\n", n)
		}
		m.p("\n")
	}
	m.p("## Reproduce\n\n")
	m.p("On a Linux machine with at least 2 cores, from the repository root:\n\n")
	m.p("```\nmake bench        # this file, %s/latest.json, the charts and the profile top (about %d minutes)\nmake bench-soak   # the 3-minute soak, added to this file\n```\n\n", chartDir, int(math.Ceil(r.Finished.Sub(r.Started).Minutes())))
	m.p("`make bench` runs `scripts/bench/run.sh`, which installs nats-server when it is missing and runs `%s`. Raw loadgen reports and process logs of each run stay in `bench-results/` (not committed). `go run ./scripts/bench/cmd/benchrun -h` lists the knobs (windows, repetitions, CPUs, a scenario filter).\n", r.Settings.Command)
	return m.Bytes()
}

// headline writes the one table a reader looks at.
func headline(m *md, r *Results) {
	m.header("Scenario", "direct", "bareproxy", "tollgate", "tollgate / bareproxy")
	get := func(name, target string) *Run { return r.lookup(name, target) }
	line := func(label, name string, val func(*Run) float64, format func(float64) string, c compare) {
		cells := []string{label}
		vals := map[string]float64{}
		for _, t := range allTargets() {
			x := get(name, t)
			if x == nil {
				cells = append(cells, "-")
				continue
			}
			vals[t] = val(x)
			cells = append(cells, format(vals[t]))
		}
		// The last column compares within each repetition (Results.paired),
		// as the targets do.
		switch x, ok := r.paired(name, targetTollgate, targetBareproxy, val, c); {
		case !ok:
			cells = append(cells, "-")
		case c == byDiff:
			cells = append(cells, delta(x)+" ms")
		default:
			cells = append(cells, times(x))
		}
		m.row(cells...)
	}
	line("Non-stream req/s, 8 clients", "nonstream-c8", rpsOf, n0, byRatio)
	line("Non-stream req/s, 32 clients", "nonstream-c32", rpsOf, n0, byRatio)
	line("Non-stream req/s, 128 clients", "nonstream-c128", rpsOf, n0, byRatio)
	line("Non-stream p50 ms, 1 client", "nonstream-c1", p50Of, ms3, byDiff)
	line("Non-stream p99 ms, 1 client", "nonstream-c1", p99Of, ms3, byDiff)
	line("Streams/s, 64 clients", "stream-c64", rpsOf, n0, byRatio)
	line("Time to first chunk p50 ms, 1 client", "stream-c1", ttfcOf, ms3, byDiff)
	line("Open loop 2,000 req/s, 300 ms upstream: p99 ms", "open-300ms-r2000", p99Of, ms2, byDiff)
	line("CPU s per 1,000 requests (1,000 req/s)", "cpu-r1000", cpuOf, ms3, byRatio)
	line("CPU s per 1,000 requests (100 req/s)", "cpu-r100", cpuOf, ms3, byRatio)
	line("Peak RSS MiB, open loop 2,000 req/s, 300 ms upstream", "open-300ms-r2000", peakRSSOf, ms2, byRatio)
	line("MiB per 1,000 held streams (5,000 open)", "hold-5000", func(x *Run) float64 { return x.RSSPer1kStreamsMB }, ms2, byRatio)
	tg, bp := r.startup(targetTollgate), r.startup(targetBareproxy)
	if tg != nil && bp != nil {
		m.row("Idle RSS MiB", "-", ms2(bp.MedianRSS), ms2(tg.MedianRSS), times(ratio(tg.MedianRSS, bp.MedianRSS)))
		m.row("Start-up to first proxied 200, ms", "-", ms2(bp.MedianMS), ms2(tg.MedianMS), delta(tg.MedianMS-bp.MedianMS)+" ms")
	}
}

// method writes how the figures were taken.
func method(m *md, r *Results) {
	s := r.Settings
	m.p("## Method\n\n")
	m.p("- **Targets.** `direct`: loadgen calls mockllm itself. `bareproxy`: loadgen -> `scripts/bench/bareproxy` (the thinnest fasthttp reverse proxy: no auth, no accounting, pooled keep-alive upstream, chunk-by-chunk relay) -> mockllm. `tollgate`: loadgen -> the gateway -> mockllm. All on 127.0.0.1.\n")
	m.p("- **Tollgate's full path.** An HS256 issuer verifies every request's JWT (minted with `tollctl token`; repeated tokens hit the verified-token cache as in production); a per-department monthly budget (large enough never to refuse) and a per-subject rate limit (high enough never to refuse) are checked and reserved on every request; every request's usage event goes to a real `nats-server` process with JetStream (its own store directory), and the budget consumer (`services/budget`, a separate process) folds the events into the spend totals the gateway watches. Routing runs on every request (one target per model, plus the fallback model of the fallback scenario); the circuit breaker is off in this config so that the fallback scenario's failing target is called on every request.\n")
	if s.Pinned {
		m.p("- **CPU pinning.** The process under test (the gateway, or the bare proxy) runs alone on CPU %s (`taskset -c %s`); loadgen, mockllm, nats-server and the budget consumer share CPU %s. The serving process therefore has one core (GOMAXPROCS 1). For `direct` there is no process in the middle: loadgen and mockllm share one core, so `direct` is the reference for latency, not an upper bound on throughput.\n", s.GatewayCPU, s.GatewayCPU, s.LoadCPU)
	} else {
		m.p("- **CPU pinning was off** (fewer than 2 CPUs or no taskset): processes shared the CPUs, so ratios are less reliable.\n")
	}
	m.p("- **Interleaving.** For each scenario, every repetition runs direct, bareproxy, tollgate in turn (A B C A B C ...), %d repetitions; tables show medians. Each comparison of tollgate with bareproxy in the targets and in the headline's last column is taken within each repetition, where the two ran back to back, and the median of those ratios (or differences) is shown: the machine's speed drifts between repetitions, and a comparison within one cancels the drift. The detail tables' × columns compare the medians. Before each run the suite waits until nats-server, the budget consumer, mockllm and the proxies are idle, so work left from one run cannot leak into the next.\n", s.Reps)
	m.p("- **Windows.** Closed loop: %.1f s warm-up, then a %.1f s measured window; requests sent inside the window are measured, the ones still in flight at its end are awaited. Open loop: latency from the intended send time, so queueing cannot hide (coordinated omission).\n", s.WarmupS, s.DurationS)
	m.p("- **Validation.** loadgen checks every answer: status, JSON shape, for streams the exact number of content chunks and the final `[DONE]`, for embeddings the dimension count. Anything else is an error of a named kind, never a fast success.\n")
	m.p("- **Memory and start-up** use freshly started processes: start-up is from `exec` (through taskset) to the first 200 of a proxied chat request, polled every millisecond; idle RSS is read one second later. Held streams: loadgen opens N streams whose chunks come one a second and keeps them open; RSS is read from /proc before and with all streams open.\n")
	m.p("- **CPU per 1,000 requests** is the serving process's user+system CPU time (/proc, 10 ms ticks) over a window at a fixed 1,000 req/s, and over a window twice as long at 100 req/s (requests 10 ms apart, each waking an idle process), divided by the requests served. At 32 clients the same CPU per request is taken over the measured window of the saturated run. For Tollgate the CPU spent by nats-server and the budget consumer on its events is shown separately.\n\n")
}

// machine writes the machine table.
func machine(m *md, r *Results) {
	mc := r.Machine
	m.p("## Machine\n\n")
	m.header("", "")
	m.row("CPUs", fmt.Sprint(mc.CPUs))
	m.row("CPU model", mc.CPUModel)
	m.row("Memory", fmt.Sprintf("%d MB", mc.MemoryMB))
	m.row("Kernel", mc.Kernel)
	m.row("Go", mc.GoVersion)
	m.row("Commit", "`"+mc.Commit+"`")
	m.row("Load average (1 min) at start / end", fmt.Sprintf("%.2f / %.2f", mc.LoadStart, mc.LoadEnd))
	m.row("Run", fmt.Sprintf("%s, %s", r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Finished.Sub(r.Started).Round(time.Second)))
	m.p("\n")
}

// closedTable writes the table of a closed-loop group.
func closedTable(m *md, r *Results, group, title string, stream bool) {
	var scs []Scenario
	for _, sc := range r.Scenarios {
		if sc.Group == group {
			scs = append(scs, sc)
		}
	}
	if len(scs) == 0 {
		return
	}
	m.p("### %s\n\n", title)
	cols := []string{"Scenario", "Target", "req/s", "× bareproxy", "× direct", "p50", "p90", "p99", "p99.9", "Δp50 bareproxy", "Δp99 bareproxy", "Δp50 direct"}
	if stream {
		cols = append(cols, "TTFC p50", "TTFC p99", "ΔTTFC p50 bareproxy")
	}
	cols = append(cols, "CPU", "load CPU", "Errors")
	m.header(cols...)
	for _, sc := range scs {
		bp, dir := sc.target(targetBareproxy), sc.target(targetDirect)
		for _, tr := range sc.Targets {
			x := tr.Median
			cells := []string{shortTitle(sc), tr.Target, n0(x.RPS)}
			cells = append(cells, relRPS(&x, bp, tr.Target == targetBareproxy), relRPS(&x, dir, tr.Target == targetDirect))
			cells = append(cells, ms3(x.P50), ms3(x.P90), ms3(x.P99), ms3(x.P999))
			cells = append(cells, relDelta(x.P50, bp, tr.Target == targetBareproxy, func(b *Run) float64 { return b.P50 }),
				relDelta(x.P99, bp, tr.Target == targetBareproxy, func(b *Run) float64 { return b.P99 }),
				relDelta(x.P50, dir, tr.Target == targetDirect, func(b *Run) float64 { return b.P50 }))
			if stream {
				cells = append(cells, ms3(x.TTFCP50), ms3(x.TTFCP99),
					relDelta(x.TTFCP50, bp, tr.Target == targetBareproxy, func(b *Run) float64 { return b.TTFCP50 }))
			}
			cells = append(cells, ms2(x.Cores), ms2(x.LoadCores), errText(&x))
			m.row(cells...)
		}
	}
	m.p("\n")
}

// shortTitle is a scenario's label in a table.
func shortTitle(sc Scenario) string {
	switch sc.Group {
	case groupNonStream:
		return fmt.Sprintf("%.0f %s", sc.X, plural(int(sc.X), "client"))
	case groupStream:
		if strings.Contains(sc.Name, "paced") {
			return fmt.Sprintf("%.0f clients, paced 5 ms", sc.X)
		}
		return fmt.Sprintf("%.0f %s", sc.X, plural(int(sc.X), "client"))
	case groupOpen:
		return fmt.Sprintf("%.0f req/s", sc.X)
	case groupHold:
		return fmt.Sprintf("%.0f streams", sc.X)
	case groupFallback:
		return fmt.Sprintf("%.0f clients", sc.X)
	case groupLarge:
		return fmt.Sprintf("%.0f KB body", sc.X)
	}
	return sc.Title
}

// relRPS is x's throughput relative to ref's, "-" for ref itself.
func relRPS(x *Run, ref *TargetResult, self bool) string {
	if self || ref == nil || len(ref.Runs) == 0 {
		return "-"
	}
	return times(ratio(x.RPS, ref.Median.RPS))
}

// relDelta is v minus ref's figure, "-" for ref itself.
func relDelta(v float64, ref *TargetResult, self bool, get func(*Run) float64) string {
	if self || ref == nil || len(ref.Runs) == 0 {
		return "-"
	}
	return delta(v - get(&ref.Median))
}

// fallbackTable writes the fallback scenario: the gateway with every
// request failing over, next to the same load without failures.
func fallbackTable(m *md, r *Results) {
	for _, sc := range r.Scenarios {
		if sc.Group != groupFallback {
			continue
		}
		m.p("### Fallback after upstream 500, %.0f clients\n\n", sc.X)
		m.p("`tollgate-fallback` asks for `%s`, whose only target always answers 500 (the mock's `X-Mock-Status` header, set on that provider): every request makes the failing call, then is served by the fallback model `mock-gpt`, two upstream calls per request. `tollgate` is the same load on `mock-gpt` directly, in the same run.\n\n", fallbackModel)
		m.header("Target", "req/s", "× without failures", "p50", "p90", "p99", "p99.9", "Δp50", "CPU", "load CPU", "Errors")
		base := sc.target(targetTollgate)
		for _, tr := range sc.Targets {
			x := tr.Median
			rel, d := "-", "-"
			if tr.Target != targetTollgate && base != nil {
				rel = times(ratio(x.RPS, base.Median.RPS))
				d = delta(x.P50 - base.Median.P50)
			}
			m.row(tr.Target, n0(x.RPS), rel, ms3(x.P50), ms3(x.P90), ms3(x.P99), ms3(x.P999), d, ms2(x.Cores), ms2(x.LoadCores), errText(&x))
		}
		m.p("\n")
	}
}

// openTable writes the open-loop table.
func openTable(m *md, r *Results) {
	first := true
	for _, sc := range r.Scenarios {
		if sc.Group != groupOpen {
			continue
		}
		if first {
			m.p("### Open loop, 300 ms upstream, 200-word prompt\n\n")
			m.header("Rate", "Target", "served req/s", "p50", "p99", "p99.9", "max", "Δp99 bareproxy", "Δp99 direct", "p99 × direct", "CPU", "load CPU", "Errors")
			first = false
		}
		bp, dir := sc.target(targetBareproxy), sc.target(targetDirect)
		for _, tr := range sc.Targets {
			x := tr.Median
			p99x := "-"
			if tr.Target != targetDirect && dir != nil {
				p99x = times(ratio(x.P99, dir.Median.P99))
			}
			m.row(shortTitle(sc), tr.Target, n0(x.RPS), ms2(x.P50), ms2(x.P99), ms2(x.P999), ms2(x.Max),
				relDelta(x.P99, bp, tr.Target == targetBareproxy, func(b *Run) float64 { return b.P99 }),
				relDelta(x.P99, dir, tr.Target == targetDirect, func(b *Run) float64 { return b.P99 }),
				p99x, ms2(x.Cores), ms2(x.LoadCores), errText(&x))
		}
	}
	if !first {
		m.p("\n")
	}
}

// cpuTable writes CPU per 1,000 requests.
func cpuTable(m *md, r *Results) {
	for _, sc := range r.Scenarios {
		if sc.Group != groupCPU {
			continue
		}
		m.p("### CPU per 1,000 requests (non-stream, fixed %.0f req/s)\n\n", sc.X)
		m.header("Target", "serving process", "CPU s / 1k requests", "× bareproxy", "× direct", "nats-server + budget CPU s / 1k", "served req/s", "Errors")
		bp, dir := sc.target(targetBareproxy), sc.target(targetDirect)
		for _, tr := range sc.Targets {
			x := tr.Median
			proc := map[string]string{targetDirect: "mockllm", targetBareproxy: "bareproxy", targetTollgate: "gateway"}[tr.Target]
			rel := func(ref *TargetResult, self bool) string {
				if self || ref == nil || len(ref.Runs) == 0 {
					return "-"
				}
				return times(ratio(x.CPUPer1k, ref.Median.CPUPer1k))
			}
			acct := "-"
			if tr.Target == targetTollgate {
				acct = ms3(x.AcctCPUPer1k)
			}
			m.row(tr.Target, proc, ms3(x.CPUPer1k), rel(bp, tr.Target == targetBareproxy), rel(dir, tr.Target == targetDirect), acct, n0(x.RPS), errText(&x))
		}
		m.p("\nFor bareproxy and tollgate the figure is the proxy's own CPU; mockllm's is not included. For direct it is mockllm's.\n\n")
	}
}

// largeTable writes the large-body table: throughput and CPU per request
// next to bareproxy's, where per-byte costs show.
func largeTable(m *md, r *Results) {
	var scs []Scenario
	for _, sc := range r.Scenarios {
		if sc.Group == groupLarge {
			scs = append(scs, sc)
		}
	}
	if len(scs) == 0 {
		return
	}
	m.p("### Large prompts: 64 KB and 512 KB chat bodies of mixed text, non-stream, 8 clients\n\n")
	m.header("Scenario", "Target", "req/s", "× bareproxy", "p50", "p99", "CPU ms / request", "× bareproxy", "CPU", "load CPU", "Errors")
	for _, sc := range scs {
		bp := sc.target(targetBareproxy)
		for _, tr := range sc.Targets {
			x := tr.Median
			self := tr.Target == targetBareproxy
			cpuRel := "-"
			if !self && bp != nil && len(bp.Runs) > 0 {
				cpuRel = times(ratio(x.CPUPer1k, bp.Median.CPUPer1k))
			}
			m.row(shortTitle(sc), tr.Target, n0(x.RPS), relRPS(&x, bp, self), ms3(x.P50), ms3(x.P99),
				ms3(x.CPUPer1k), cpuRel, ms2(x.Cores), ms2(x.LoadCores), errText(&x))
		}
	}
	m.p("\nCPU per request is the serving process's (mockllm's for direct). The bodies are loadgen's -history-mixed text: quotes, newlines, code and non-ASCII text.\n\n")
}

// memoryTable writes the held-streams table.
func memoryTable(m *md, r *Results) {
	first := true
	for _, sc := range r.Scenarios {
		if sc.Group != groupHold {
			continue
		}
		if first {
			m.p("### Memory with concurrent slow streams (fresh process each repetition)\n\n")
			m.header("Streams", "Target", "open at end", "RSS before MiB", "RSS with streams MiB", "MiB per 1,000 streams", "× bareproxy", "Errors")
			first = false
		}
		bp := sc.target(targetBareproxy)
		for _, tr := range sc.Targets {
			x := tr.Median
			rel := "-"
			if tr.Target != targetBareproxy && bp != nil {
				rel = times(ratio(x.RSSPer1kStreamsMB, bp.Median.RSSPer1kStreamsMB))
			}
			m.row(shortTitle(sc), tr.Target, fmt.Sprint(x.OpenAtEnd), ms2(x.RSSStartMB), ms2(x.RSSEndMB), ms2(x.RSSPer1kStreamsMB), rel, errText(&x))
		}
	}
	if !first {
		m.p("\n")
	}
}

// startupTable writes start-up and idle memory.
func startupTable(m *md, r *Results) {
	if len(r.Startup) == 0 {
		return
	}
	m.p("### Start-up and idle memory (fresh process each repetition)\n\n")
	m.header("Process", "start-up ms (median)", "every run, ms", "idle RSS MiB (median)", "of which anonymous MiB", "every run, MiB")
	for _, st := range r.Startup {
		m.row(st.Target, ms2(st.MedianMS), joinNums(st.StartupMS, ms2), ms2(st.MedianRSS), ms2(st.MedianAnon), joinNums(st.IdleRSSMB, ms2))
	}
	m.p("\nStart-up of `tollgate` includes connecting to NATS, checking the usage stream and the spend bucket and loading the spend totals; `--embed` (the gateway built with `-tags embed`, which links the NATS server; the default build does not) starts an embedded NATS JetStream server and the budget consumer in the process instead. ")
	m.p("Anonymous memory (RssAnon) is heap, stacks and runtime; the rest of the RSS is the program's own code and read-only data paged in from its file, which the kernel shares and can reclaim.\n\n")
}

// soakSection writes the soak result, if any.
func soakSection(m *md, s *Soak) {
	m.p("### Soak (`make bench-soak`)\n\n")
	if s == nil {
		m.p("Not run yet: `make bench-soak` runs %s, and adds its result here.\n\n", soakDescription())
		return
	}
	m.p("%d streams/s (open loop) for %s, each answer %d chunks %s apart; run %s.\n\n",
		s.Rate, time.Duration(s.DurationS*float64(time.Second)), soakChunks, soakChunkDelay, s.Started.UTC().Format("2006-01-02 15:04 UTC"))
	m.header("Target", "requests", "served/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "TTFC p99 ms", "RSS start / end / peak MiB", "CPU s / 1k", "nats + budget CPU s / 1k", "Errors")
	row := func(target string, x Run) {
		m.row(target, fmt.Sprint(x.Requests), n0(x.RPS), ms2(x.P50), ms2(x.P99), ms2(x.P999), ms2(x.Max), ms2(x.TTFCP99),
			fmt.Sprintf("%.1f / %.1f / %.1f", x.RSSStartMB, x.RSSEndMB, x.PeakRSSMB), ms3(x.CPUPer1k), ms3(x.AcctCPUPer1k), errText(&x))
	}
	row(s.Target, s.Run)
	for _, t := range allTargets() {
		if x, ok := s.Others[t]; ok {
			row(t, x)
		}
	}
	m.p("\n")
}

// goBenchSection writes the per-stage Go benchmark table.
func goBenchSection(m *md, gb *GoBench) {
	m.p("## Go benchmarks per stage of the hot path\n\n")
	if gb == nil {
		m.p("Not run in this run.\n\n")
		return
	}
	m.p("Each stage's benchmark run once (`%s`), on both CPUs.\n\n", gb.Command)
	m.header("Stage", "Benchmark", "ns/op", "B/op", "allocs/op")
	for _, r := range gb.Rows {
		m.row(r.Stage, fmt.Sprintf("`%s` %s", r.Package, r.Name), fmtNum(r.NsPerOp), n0(r.BytesPerOp), n0(r.AllocsPerOp))
	}
	m.p("\n")
	if len(gb.Missing) > 0 {
		m.p("Stages without a benchmark yet: %s.\n\n", strings.Join(gb.Missing, "; "))
	}
	for _, f := range gb.Failures {
		m.p("- did not run: %s\n", f)
	}
	if len(gb.Failures) > 0 {
		m.p("\n")
	}
}

// profileSection links the gateway's CPU profile tops, or says why there
// are none.
func profileSection(m *md, prs []*Profile, dir string) {
	m.p("## Gateway CPU profiles\n\n")
	if len(prs) == 0 {
		m.p("Not taken in this run: `make bench` profiles the gateway in an extra run of each of `%s` after that scenario's measured repetitions.\n\n", strings.Join(profileScenarios, "`, `"))
		return
	}
	m.p("Each file is the top of the gateway's CPU profile while it served one scenario: the %d functions with the most CPU time of their own (flat), then the %[1]d with the most time including their callees (cum), as `go tool pprof -top` and `-top -cum` show them. ", profileTopN)
	m.p("Each was taken from the admin listener's `/debug/pprof/profile` during an extra run of its scenario on tollgate after the scenario's measured repetitions, so profiling slowed none of the figures above; those runs are in no table.\n\n")
	for _, pr := range prs {
		if pr.File == "" {
			m.p("- `%s`: could not be taken in this run: %s.\n", pr.Scenario, pr.Error)
			continue
		}
		f := path.Join(dir, pr.File)
		m.p("- [%s](%s): `%s` (%s), a %s run.\n", f, f, pr.Scenario, pr.Title, time.Duration(pr.WindowS*float64(time.Second)))
	}
	m.p("\n")
}

// joinNums formats every value of v.
func joinNums(v []float64, f func(float64) string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = f(x)
	}
	return strings.Join(s, ", ")
}

// pausedSection sets each run with the accounting servers paused beside
// the measured medians of its scenario.
func pausedSection(m *md, r *Results) {
	m.p("## Runs with the accounting servers paused\n\n")
	if len(r.Paused) == 0 {
		m.p("None in this run.\n\n")
		return
	}
	m.p("nats-server and the budget consumer share the load CPU with loadgen and mockllm. After all the measured runs, each scenario below ran again on tollgate, as many times as it was measured, with the servers named stopped (SIGSTOP) for each run's whole length and resumed after it (last, so that the events the gateway held in memory meanwhile weigh on no measured figure; a short run with the servers up came first, so that the gateway's budget lease was fresh). The figures are the medians of those runs; being last, they ran minutes after the medians they are set beside, so a change in the machine's speed meanwhile shows in them too. ")
	m.p("The gateway still did all of its own work, usage events included (they wait in its NATS connection and are stored when the server resumes); what the run leaves out is the servers' CPU on the load CPU, and, with the budget consumer stopped, the spend totals arriving at the gateway. ")
	m.p("With nats-server stopped, though, the gateway runs as it does in a NATS stall: no batch is acknowledged, and its unacknowledged batches pile up in its connection and its memory, more of them the higher the rate. So the servers are paused only where the load is light, at 1 client and (the budget consumer alone) at the fixed rates, where the figure bounds their share; under saturating load it would measure a stall, not the gateway without accounting. ")
	m.p("These runs are in no other table and decide no verdict.\n\n")
	m.header("Scenario", "Paused", "req/s", "p50", "p99", "CPU s per 1k", "load CPU", "Errors", "tollgate median: req/s, p99, CPU s per 1k", "bareproxy median: req/s, p99, CPU s per 1k")
	med := func(x *Run) string {
		if x == nil {
			return "-"
		}
		return fmt.Sprintf("%.0f, %.3f, %.3f", x.RPS, x.P99, x.CPUPer1k)
	}
	for _, p := range r.Paused {
		title := p.Scenario
		for _, sc := range r.Scenarios {
			if sc.Name == p.Scenario {
				title = sc.Title
			}
		}
		if p.Run == nil {
			m.row(title, p.pausedText(), "failed: "+p.Error, "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		x := p.Run
		m.row(title, p.pausedText(), n0(x.RPS), ms3(x.P50), ms3(x.P99), fmt.Sprintf("%.3f", x.CPUPer1k), ms2(x.LoadCores), errText(x),
			med(r.lookup(p.Scenario, targetTollgate)), med(r.lookup(p.Scenario, targetBareproxy)))
	}
	m.p("\n")
}
