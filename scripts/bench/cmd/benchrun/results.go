package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/tollgate/tollgate/pkg/loadgen"
)

// resultsVersion is bumped when the JSON layout changes incompatibly.
const resultsVersion = 1

// Results is everything one run of the suite measured; it is written as
// JSON (docs/bench/latest.json) and rendered into BENCHMARKS.md.
type Results struct {
	Version  int       `json:"version"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`
	// Scenarios are the load scenarios in the order they ran.
	Scenarios []Scenario `json:"scenarios"`
	// Startup holds start-up time and idle memory per target.
	Startup []Startup `json:"startup"`
	// GoBench is the per-stage Go benchmark table.
	GoBench *GoBench `json:"go_bench,omitempty"`
	// Profiles are the gateway's CPU profile tops of the profileScenarios
	// that ran, in the order they ran.
	Profiles []*Profile `json:"profiles,omitempty"`
	// Paused are the runs of the pausedScenarios with the accounting
	// servers stopped, in the order they ran.
	Paused []*Paused `json:"paused,omitempty"`
	// Pending lists scenarios that cannot run yet, with the reason.
	Pending []Pending `json:"pending"`
	// Notes are remarks about this run (retries, a busy machine).
	Notes []string `json:"notes,omitempty"`
}

// Machine describes where the suite ran.
type Machine struct {
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpu_model"`
	MemoryMB  int64   `json:"memory_mb"`
	Kernel    string  `json:"kernel"`
	GoVersion string  `json:"go_version"`
	Commit    string  `json:"commit"`
	LoadStart float64 `json:"load_avg_start"`
	LoadEnd   float64 `json:"load_avg_end"`
}

// Settings are the parameters of the run.
type Settings struct {
	Command    string   `json:"command"`
	Reps       int      `json:"reps"`
	WarmupS    float64  `json:"warmup_s"`
	DurationS  float64  `json:"duration_s"`
	Pinned     bool     `json:"pinned"`
	GatewayCPU string   `json:"gateway_cpu"`
	LoadCPU    string   `json:"load_cpu"`
	Targets    []string `json:"targets"`
}

// Pending is a scenario of the brief that does not run yet.
type Pending struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Scenario is one load scenario measured on each target.
type Scenario struct {
	Name  string `json:"name"`
	Group string `json:"group"`
	Title string `json:"title"`
	// X is the chart position: clients, rate or streams.
	X       float64        `json:"x"`
	Args    []string       `json:"loadgen_args"`
	Targets []TargetResult `json:"targets"`
}

// target returns the result for name, or nil.
func (s *Scenario) target(name string) *TargetResult {
	for i := range s.Targets {
		if s.Targets[i].Target == name {
			return &s.Targets[i]
		}
	}
	return nil
}

// TargetResult holds a scenario's repetitions on one target and their
// medians.
type TargetResult struct {
	Target string `json:"target"`
	Runs   []Run  `json:"runs"`
	// Median is the per-figure median over Runs; its error counts are the
	// sums over Runs.
	Median Run `json:"median"`
}

// Run is the summary of one loadgen run. Times are in milliseconds, memory
// in MiB, CPU in seconds.
type Run struct {
	Requests     int64            `json:"requests"`
	Errors       int64            `json:"errors"`
	ErrorsByKind map[string]int64 `json:"errors_by_kind,omitempty"`
	RPS          float64          `json:"rps"`
	P50          float64          `json:"p50_ms"`
	P90          float64          `json:"p90_ms"`
	P99          float64          `json:"p99_ms"`
	P999         float64          `json:"p99_9_ms"`
	Max          float64          `json:"max_ms"`
	TTFCP50      float64          `json:"ttfc_p50_ms,omitempty"`
	TTFCP99      float64          `json:"ttfc_p99_ms,omitempty"`
	// CPUPer1k and Cores are the serving process's (gateway, bare proxy,
	// or mockllm for direct).
	CPUPer1k  float64 `json:"cpu_s_per_1k"`
	Cores     float64 `json:"cores"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// AcctCPUPer1k is the CPU of nats-server and the budget consumer per
	// 1,000 requests: the accounting work done off the gateway (tollgate only).
	AcctCPUPer1k float64 `json:"acct_cpu_s_per_1k,omitempty"`
	// LoadCores is the CPU, in cores, used by everything on the load CPU
	// (loadgen, mockllm and, for tollgate, nats-server and the budget
	// consumer). Near 1 the load side, not the target, sets the pace.
	LoadCores float64 `json:"load_cores"`
	// Hold runs: RSS before and with the streams open, per 1,000 streams.
	RSSStartMB        float64 `json:"rss_start_mb,omitempty"`
	RSSEndMB          float64 `json:"rss_end_mb,omitempty"`
	RSSPer1kStreamsMB float64 `json:"rss_per_1k_streams_mb,omitempty"`
	OpenAtEnd         int64   `json:"open_at_end,omitempty"`
	// Raw is the loadgen JSON report's file name under the raw directory.
	Raw string `json:"raw,omitempty"`
}

// Startup is start-up time and idle memory of one target kind.
type Startup struct {
	Target    string    `json:"target"`
	StartupMS []float64 `json:"startup_ms"`
	IdleRSSMB []float64 `json:"idle_rss_mb"`
	// IdleAnonMB is the anonymous part of the idle RSS (RssAnon): the rest
	// is the binary's code and data pages.
	IdleAnonMB []float64 `json:"idle_anon_mb"`
	MedianMS   float64   `json:"median_startup_ms"`
	MedianRSS  float64   `json:"median_idle_rss_mb"`
	MedianAnon float64   `json:"median_idle_anon_mb"`
}

// summarize turns a loadgen report into a Run; target is the serving
// process, acct the accounting processes (may be empty); pinned says the
// target has a CPU of its own (it is not counted in LoadCores).
func summarize(r *loadgen.Report, target int, acct []int, pinned bool) Run {
	run := Run{
		Requests: r.Requests, Errors: r.Errors, RPS: r.RPS,
		P50: r.Latency.P50MS, P90: r.Latency.P90MS, P99: r.Latency.P99MS, P999: r.Latency.P999MS, Max: r.Latency.MaxMS,
	}
	if len(r.ErrorsByKind) > 0 {
		run.ErrorsByKind = r.ErrorsByKind
	}
	if r.TTFC != nil {
		run.TTFCP50, run.TTFCP99 = r.TTFC.P50MS, r.TTFC.P99MS
	}
	if r.Hold != nil {
		run.OpenAtEnd = r.Hold.OpenAtEnd
	}
	for _, p := range r.Procs {
		if p.PID != target || !pinned {
			run.LoadCores += p.Cores
		}
		switch {
		case p.PID == target:
			run.CPUPer1k, run.Cores, run.PeakRSSMB = p.CPUPer1kRequests, p.Cores, p.PeakRSSMB
			run.RSSStartMB, run.RSSEndMB, run.RSSPer1kStreamsMB = p.RSSStartMB, p.RSSEndMB, p.RSSPer1kStreamsMB
		case slices.Contains(acct, p.PID):
			run.AcctCPUPer1k += p.CPUPer1kRequests
		}
	}
	return run
}

// medianRun is the per-figure median of runs, with error counts summed.
func medianRun(runs []Run) Run {
	if len(runs) == 0 {
		return Run{}
	}
	f := func(get func(*Run) float64) float64 {
		v := make([]float64, len(runs))
		for i := range runs {
			v[i] = get(&runs[i])
		}
		return median(v)
	}
	m := Run{
		RPS:               f(func(r *Run) float64 { return r.RPS }),
		P50:               f(func(r *Run) float64 { return r.P50 }),
		P90:               f(func(r *Run) float64 { return r.P90 }),
		P99:               f(func(r *Run) float64 { return r.P99 }),
		P999:              f(func(r *Run) float64 { return r.P999 }),
		Max:               f(func(r *Run) float64 { return r.Max }),
		TTFCP50:           f(func(r *Run) float64 { return r.TTFCP50 }),
		TTFCP99:           f(func(r *Run) float64 { return r.TTFCP99 }),
		CPUPer1k:          f(func(r *Run) float64 { return r.CPUPer1k }),
		Cores:             f(func(r *Run) float64 { return r.Cores }),
		PeakRSSMB:         f(func(r *Run) float64 { return r.PeakRSSMB }),
		AcctCPUPer1k:      f(func(r *Run) float64 { return r.AcctCPUPer1k }),
		LoadCores:         f(func(r *Run) float64 { return r.LoadCores }),
		RSSStartMB:        f(func(r *Run) float64 { return r.RSSStartMB }),
		RSSEndMB:          f(func(r *Run) float64 { return r.RSSEndMB }),
		RSSPer1kStreamsMB: f(func(r *Run) float64 { return r.RSSPer1kStreamsMB }),
		OpenAtEnd:         int64(f(func(r *Run) float64 { return float64(r.OpenAtEnd) })),
		Requests:          int64(f(func(r *Run) float64 { return float64(r.Requests) })),
	}
	for _, r := range runs {
		m.Errors += r.Errors
		for k, n := range r.ErrorsByKind {
			if m.ErrorsByKind == nil {
				m.ErrorsByKind = map[string]int64{}
			}
			m.ErrorsByKind[k] += n
		}
	}
	return m
}

// median returns the median of v (the mean of the middle two for an even
// count); v is not modified.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// writeJSON writes v, indented, to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// readJSON reads path into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// profile returns the profile of scenario name, or nil when it was not
// profiled in this run.
func (r *Results) profile(name string) *Profile {
	for _, pr := range r.Profiles {
		if pr.Scenario == name {
			return pr
		}
	}
	return nil
}
