// Command benchrun is the benchmark suite behind `make bench`: it builds
// the gateway, mockllm, loadgen, tollctl, the budget consumer and the bare
// proxy, starts a real nats-server, and measures three targets on every
// scenario of the benchmark brief, interleaved (direct, bareproxy,
// tollgate, direct, ...), pinning the process under test to one CPU and
// the load generator, mockllm, NATS and the budget consumer to the other.
// It writes BENCHMARKS.md, docs/bench/latest.json, SVG charts and the top
// of the gateway's CPU profile in one scenario (see profile.go).
//
//	benchrun                    # the full suite (about 17 minutes on 2 cores)
//	benchrun -only 'nonstream'  # a subset; results stay in bench-results/
//	benchrun -soak              # the 3-minute soak, added to BENCHMARKS.md
//	benchrun -render            # rewrite BENCHMARKS.md and the charts from the JSON
//
// Every process it starts listens on 127.0.0.1 and is stopped by its PID
// when the suite ends, fails or is interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/pkg/procs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchrun: %v\n", err)
		os.Exit(1)
	}
}

// options are the command-line settings.
type options struct {
	args        []string
	outDir      string
	mdPath      string
	rawRoot     string
	reps        int
	startReps   int
	t           timing
	benchtime   string
	noGoBench   bool
	only        *regexp.Regexp
	profile     *regexp.Regexp
	render      bool
	soak        bool
	soakDur     time.Duration
	soakRate    int
	maxLoad     float64
	loadWait    time.Duration
	gwCPU       string
	loadCPU     string
	noPin       bool
	planOnly    bool
	soakTargets []string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("benchrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{args: args}
	var only, profile, soakTargets string
	fs.StringVar(&o.outDir, "out", "docs/bench", "`dir` for latest.json, soak.json and the SVG charts (committed)")
	fs.StringVar(&o.mdPath, "md", "BENCHMARKS.md", "markdown report `file`")
	fs.StringVar(&o.rawRoot, "raw", "bench-results", "`dir` for built programs, raw loadgen reports and logs (not committed)")
	fs.IntVar(&o.reps, "reps", 3, "repetitions of each scenario on each target (medians reported)")
	fs.IntVar(&o.startReps, "startup-reps", 5, "repetitions of the start-up and idle memory measurement")
	fs.DurationVar(&o.t.warmup, "warmup", 500*time.Millisecond, "closed-loop warm-up before each measured window (open loop: at least 1s)")
	fs.DurationVar(&o.t.dur, "d", 3*time.Second, "measured window of each run")
	fs.DurationVar(&o.t.holdDur, "hold-d", 3*time.Second, "how long held streams stay open")
	fs.DurationVar(&o.t.cpuDur, "cpu-d", 4*time.Second, "window of the CPU-per-1,000-requests run at 1,000 req/s (the 100 req/s run takes twice as long)")
	fs.StringVar(&o.benchtime, "benchtime", "200ms", "go test -benchtime for the per-stage Go benchmarks")
	fs.BoolVar(&o.noGoBench, "no-gobench", false, "skip the per-stage Go benchmarks")
	fs.StringVar(&only, "only", "", "run only scenarios whose name matches this `regexp` (results stay in -raw)")
	fs.StringVar(&profile, "profile", "", "CPU-profile the gateway (admin pprof) during the first tollgate run of scenarios matching this `regexp`; saved in -raw")
	fs.BoolVar(&o.render, "render", false, "only rewrite the markdown and charts from -out/latest.json")
	fs.BoolVar(&o.soak, "soak", false, "run the soak instead of the suite")
	fs.DurationVar(&o.soakDur, "soak-d", 3*time.Minute, "soak duration")
	fs.IntVar(&o.soakRate, "soak-rate", 200, "soak streams per second")
	fs.StringVar(&soakTargets, "soak-targets", targetTollgate, "comma-separated targets of the soak (tollgate, bareproxy, direct)")
	fs.Float64Var(&o.maxLoad, "max-load", 1.5, "wait until the 1-minute load average is below this before starting")
	fs.DurationVar(&o.loadWait, "load-wait", 3*time.Minute, "longest wait for the load average")
	fs.StringVar(&o.gwCPU, "gateway-cpu", "0", "CPU list of the process under test")
	fs.StringVar(&o.loadCPU, "load-cpu", "1", "CPU list of loadgen, mockllm, nats-server and the budget consumer")
	fs.BoolVar(&o.noPin, "no-pin", false, "do not pin processes to CPUs")
	fs.BoolVar(&o.planOnly, "plan", false, "print the plan and its time estimate, run nothing")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return nil, fmt.Errorf("-only: %w", err)
		}
		o.only = re
	}
	if profile != "" {
		re, err := regexp.Compile(profile)
		if err != nil {
			return nil, fmt.Errorf("-profile: %w", err)
		}
		o.profile = re
	}
	for t := range strings.SplitSeq(soakTargets, ",") {
		t = strings.TrimSpace(t)
		if t != targetDirect && t != targetBareproxy && t != targetTollgate {
			return nil, fmt.Errorf("-soak-targets: unknown target %q", t)
		}
		o.soakTargets = append(o.soakTargets, t)
	}
	switch {
	case o.reps < 1, o.startReps < 1:
		return nil, errors.New("-reps and -startup-reps must be at least 1")
	case o.t.dur <= 0, o.t.holdDur <= 0, o.t.cpuDur <= 0, o.soakDur <= 0, o.t.warmup < 0:
		return nil, errors.New("durations must be positive")
	case o.t.dur > 5*time.Minute, o.soakDur > 30*time.Minute:
		return nil, errors.New("windows are bounded: -d at most 5m, -soak-d at most 30m")
	case o.soakRate < 1 || o.soakRate > 5000:
		return nil, errors.New("-soak-rate: want 1..5000")
	}
	return o, nil
}

// run is the whole program; it returns when everything it started has
// stopped.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return errors.New("run from the repository root (go.mod not found)")
	}
	switch {
	case o.render:
		return renderFiles(o, stdout)
	case o.soak:
		return runSoak(ctx, o, stdout)
	}
	return runSuite(ctx, o, stdout)
}

// env is what a measuring run sets up: the raw directory, the processes
// and the machine description.
type env struct {
	rawDir  string
	ps      *procs.Group
	st      *stack
	machine Machine
	notes   []string
	pinned  bool
}

// prepare waits for a quiet machine, builds the programs and starts the
// stack. The caller must call ps.stopAll.
func prepare(ctx context.Context, o *options, out io.Writer) (*env, error) {
	e := &env{}
	raiseFileLimit()
	e.pinned = !o.noPin && runtime.NumCPU() >= 2
	if e.pinned {
		if _, err := exec.LookPath("taskset"); err != nil {
			e.pinned = false
			e.notes = append(e.notes, "taskset not found: processes were not pinned")
		}
	} else if !o.noPin {
		e.notes = append(e.notes, "fewer than 2 CPUs: processes were not pinned")
	}
	if note := waitQuiet(ctx, o.maxLoad, o.loadWait, out); note != "" {
		e.notes = append(e.notes, note)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.machine = describeMachine()
	e.rawDir = filepath.Join(o.rawRoot, time.Now().UTC().Format("20060102-150405"))
	if err := os.MkdirAll(e.rawDir, 0o755); err != nil {
		return nil, fmt.Errorf("create raw dir: %w", err)
	}
	bin, err := filepath.Abs(filepath.Join(o.rawRoot, "bin"))
	if err != nil {
		return nil, fmt.Errorf("bin dir: %w", err)
	}
	fmt.Fprintf(out, "building programs into %s\n", bin)
	if err := build(ctx, ".", bin); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "tollgate-bench-")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	e.ps = &procs.Group{LogDir: e.rawDir}
	e.st = &stack{ps: e.ps, bin: bin, work: work}
	if e.pinned {
		e.st.gwCPU, e.st.loadCPU = o.gwCPU, o.loadCPU
	}
	fmt.Fprintf(out, "starting nats-server, budget, mockllm, bareproxy and gateway (logs in %s)\n", e.rawDir)
	if err := e.st.startAll(ctx); err != nil {
		return e, err
	}
	return e, nil
}

// cleanup stops every process and removes the work directory.
func (e *env) cleanup(out io.Writer) {
	if e == nil || e.ps == nil {
		return
	}
	if err := e.ps.StopAll(stopGrace); err != nil {
		fmt.Fprintf(out, "stopping processes: %v\n", err)
	}
	if e.st != nil && e.st.work != "" {
		_ = os.RemoveAll(e.st.work)
	}
}

// runSuite runs every scenario, the start-up measurements and the Go
// benchmarks, and writes the results.
func runSuite(ctx context.Context, o *options, out io.Writer) error {
	all := plans(o.t)
	var ps []plan
	for _, p := range all {
		if o.only == nil || o.only.MatchString(p.name) {
			ps = append(ps, p)
		}
	}
	withStartup := o.only == nil || o.only.MatchString("startup")
	withGoBench := !o.noGoBench && (o.only == nil || o.only.MatchString("gobench"))
	startReps := o.startReps
	if !withStartup {
		startReps = 0
	}
	printPlan(out, ps, o, startReps, withGoBench)
	if o.planOnly {
		return nil
	}

	started := time.Now()
	e := &env{machine: describeMachine(), rawDir: filepath.Join(o.rawRoot, started.UTC().Format("20060102-150405"))}
	if len(ps) > 0 || startReps > 0 {
		var err error
		e, err = prepare(ctx, o, out)
		defer e.cleanup(out)
		if err != nil {
			return err
		}
	} else if err := os.MkdirAll(e.rawDir, 0o755); err != nil {
		return fmt.Errorf("create raw dir: %w", err)
	}
	res := &Results{
		Version: resultsVersion, Started: started, Machine: e.machine, Notes: e.notes,
		Settings: Settings{
			Command: strings.TrimSpace("benchrun " + strings.Join(o.args, " ")), Reps: o.reps,
			WarmupS: o.t.warmup.Seconds(), DurationS: o.t.dur.Seconds(), Pinned: e.pinned,
			GatewayCPU: o.gwCPU, LoadCPU: o.loadCPU, Targets: allTargets(),
		},
	}
	outDir, mdPath := o.outDir, o.mdPath
	if o.only != nil {
		// A partial run must not replace the committed results.
		outDir, mdPath = e.rawDir, filepath.Join(e.rawDir, "BENCHMARKS.md")
	}
	s := &suite{st: e.st, rawDir: e.rawDir, reps: o.reps, out: out, profile: o.profile}
	profileTops := map[string][]byte{} // by scenario, written with the results
	total := 0
	for _, p := range ps {
		total += o.reps * len(p.targets)
	}
	done := 0
	for _, p := range ps {
		fmt.Fprintf(out, "%s: %s\n", p.name, p.title)
		sc, err := s.runPlan(ctx, p, done, total)
		if err != nil {
			return err
		}
		done += o.reps * len(p.targets)
		res.Scenarios = append(res.Scenarios, sc)
		if profiled(p.name) {
			// After the measured repetitions, so that profiling slows none
			// of them (see profile.go).
			pr, top := s.profileRun(ctx, p, e.machine.Commit)
			res.Profiles, profileTops[p.name] = append(res.Profiles, pr), top
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := writeJSON(filepath.Join(e.rawDir, "results.json"), res); err != nil {
			return err
		}
	}
	// After every measured run: with NATS stopped the gateway holds its
	// events in memory, which later figures of the same process (peak RSS
	// above all) must not see.
	for _, p := range ps {
		if _, ok := pausedScenarios[p.name]; !ok {
			continue
		}
		res.Paused = append(res.Paused, s.pausedRun(ctx, p))
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(e.rawDir, "results.json"), res); err != nil {
			return err
		}
	}
	if startReps > 0 {
		fmt.Fprintf(out, "start-up and idle memory, %d repetitions\n", startReps)
		st, err := s.startups(ctx, startReps)
		if err != nil {
			return err
		}
		res.Startup = st
	}
	e.cleanup(out)
	if withGoBench {
		fmt.Fprintf(out, "per-stage Go benchmarks\n")
		res.GoBench = runGoBench(ctx, ".", o.benchtime, out)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	res.Finished = time.Now()
	res.Machine.LoadEnd = loadAvg()
	if res.Machine.LoadStart > o.maxLoad || res.Machine.LoadEnd > o.maxLoad+1 {
		res.Notes = append(res.Notes, fmt.Sprintf("the machine was busy (load average %.2f at start, %.2f at end): other work may have disturbed the figures", res.Machine.LoadStart, res.Machine.LoadEnd))
	}
	if err := writeAll(res, outDir, mdPath); err != nil {
		return err
	}
	for _, pr := range res.Profiles {
		if err := writeProfileTop(pr, profileTops[pr.Scenario], outDir); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\ndone in %s: %s, %s/latest.json and charts written\n\n", time.Since(started).Round(time.Second), mdPath, outDir)
	summary(out, res)
	for _, pr := range res.Profiles {
		if pr.File != "" {
			fmt.Fprintf(out, "  gateway CPU profile top (%s): %s\n", pr.Scenario, filepath.Join(outDir, pr.File))
		} else {
			fmt.Fprintf(out, "  gateway CPU profile (%s) not taken: %s\n", pr.Scenario, pr.Error)
		}
	}
	return nil
}

// writeProfileTop writes the profile top into outDir, or removes the one
// of an earlier run when this run's profile could not be taken, so that
// no profile sits next to figures it does not belong to.
func writeProfileTop(pr *Profile, top []byte, outDir string) error {
	if pr == nil {
		return nil
	}
	file := filepath.Join(outDir, profileFile(pr.Scenario))
	if top == nil {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale profile: %w", err)
		}
		return nil
	}
	if err := os.WriteFile(file, top, 0o644); err != nil {
		return fmt.Errorf("write profile top: %w", err)
	}
	return nil
}

// writeAll writes the JSON, the charts and the markdown.
func writeAll(res *Results, outDir, mdPath string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", outDir, err)
	}
	if err := writeJSON(filepath.Join(outDir, "latest.json"), res); err != nil {
		return err
	}
	return renderTo(res, outDir, mdPath)
}

// renderTo writes the charts and the markdown from res (and the soak file
// in outDir when there is one).
func renderTo(res *Results, outDir, mdPath string) error {
	for _, c := range charts(res) {
		if err := os.WriteFile(filepath.Join(outDir, c.file), c.chart.svg(), 0o644); err != nil {
			return fmt.Errorf("write chart: %w", err)
		}
	}
	var soak *Soak
	if _, err := os.Stat(filepath.Join(outDir, "soak.json")); err == nil {
		soak = &Soak{}
		if err := readJSON(filepath.Join(outDir, "soak.json"), soak); err != nil {
			return err
		}
	}
	rel, err := filepath.Rel(filepath.Dir(mdPath), outDir)
	if err != nil {
		rel = outDir
	}
	if err := os.WriteFile(mdPath, render(res, soak, filepath.ToSlash(rel)), 0o644); err != nil {
		return fmt.Errorf("write markdown: %w", err)
	}
	return nil
}

// renderFiles rewrites the markdown and charts from the committed JSON.
func renderFiles(o *options, out io.Writer) error {
	var res Results
	if err := readJSON(filepath.Join(o.outDir, "latest.json"), &res); err != nil {
		return err
	}
	if err := renderTo(&res, o.outDir, o.mdPath); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s and charts in %s rewritten\n", o.mdPath, o.outDir)
	return nil
}

// printPlan prints what will run and how long it should take.
func printPlan(out io.Writer, ps []plan, o *options, startReps int, goBench bool) {
	fmt.Fprintf(out, "benchmark plan: %d scenarios x %d repetitions, interleaved over their targets\n", len(ps), o.reps)
	for _, p := range ps {
		fmt.Fprintf(out, "  %-20s %-40s warm-up %-5s window %-4s targets %s\n", p.name, shorten(p.title, 40), p.warmup, p.dur, strings.Join(p.targets, ","))
	}
	if startReps > 0 {
		fmt.Fprintf(out, "  start-up and idle RSS: bareproxy, tollgate, tollgate --embed, %d repetitions\n", startReps)
	}
	for _, p := range ps {
		if profiled(p.name) {
			fmt.Fprintf(out, "  %-20s one more tollgate run (window %s), not measured: the gateway's CPU profile\n", p.name, profilePlan(p).dur)
		}
	}
	for _, p := range ps {
		if srv, ok := pausedScenarios[p.name]; ok {
			fmt.Fprintf(out, "  %-20s one more tollgate run after all the others, not measured: %s paused\n", p.name, strings.Join(srv, " and "))
		}
	}
	if goBench {
		fmt.Fprintf(out, "  per-stage Go benchmarks (-benchtime %s)\n", o.benchtime)
	}
	fmt.Fprintf(out, "planned total: about %s\n\n", estimate(ps, o.reps, startReps, goBench).Round(10*time.Second))
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// summary prints the targets verdicts.
func summary(out io.Writer, res *Results) {
	for _, c := range evaluate(res) {
		fmt.Fprintf(out, "  %-13s %-80s %s\n", c.Verdict, c.Goal, c.Measured)
	}
}

// waitQuiet waits until the 1-minute load average is below max, at most
// wait; it returns a note when it gave up.
func waitQuiet(ctx context.Context, limit float64, wait time.Duration, out io.Writer) string {
	deadline := time.Now().Add(wait)
	for {
		l := loadAvg()
		if l < limit {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("load average still %.2f after waiting %s; the run went ahead", l, wait)
		}
		fmt.Fprintf(out, "load average %.2f >= %.2f: waiting for a quieter machine\n", l, limit)
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(10 * time.Second):
		}
	}
}

// loadAvg returns the 1-minute load average, 0 when unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// describeMachine reads the CPU, memory, kernel, Go version and commit.
func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), LoadStart: loadAvg(), GoVersion: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemoryMB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
		if x := os.Getenv("GOEXPERIMENT"); x != "" {
			m.GoVersion += " GOEXPERIMENT=" + x
		}
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if err := exec.Command("git", "diff", "--quiet", "HEAD", "--", "services", "pkg", "scripts/bench").Run(); err != nil {
			m.Commit += " (with uncommitted changes)"
		}
	}
	return m
}

// raiseFileLimit lifts the open-file soft limit to the hard limit, for
// this process and the ones it starts (5,000 held streams need over
// 10,000 descriptors in the gateway).
func raiseFileLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return
	}
	// Always set it: the Go runtime raised the soft limit for this
	// process already, but gives children the original one back unless
	// the program sets the limit itself.
	l.Cur = l.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}
