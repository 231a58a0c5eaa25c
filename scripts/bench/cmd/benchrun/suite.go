package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/pkg/loadgen"
	"github.com/tollgate/tollgate/pkg/procs"
)

// suite runs the scenarios against the stack.
type suite struct {
	st     *stack
	rawDir string // loadgen reports and logs of this run
	reps   int
	out    io.Writer // progress
	runs   int       // loadgen runs done, for report file names
	// profile selects scenarios whose first tollgate run is CPU-profiled.
	profile *regexp.Regexp
}

// runPlan measures p on each of its targets, interleaved: for each
// repetition every target once, in order (A B C A B C ...).
func (s *suite) runPlan(ctx context.Context, p plan, done, total int) (Scenario, error) {
	sc := Scenario{Name: p.name, Group: p.group, Title: p.title, X: p.x, Args: p.args}
	byTarget := map[string][]Run{}
	for rep := 1; rep <= s.reps; rep++ {
		for _, target := range p.targets {
			if err := ctx.Err(); err != nil {
				return sc, err
			}
			if err := s.st.check(); err != nil {
				return sc, err
			}
			run, err := s.one(ctx, p, target, rep)
			if err != nil {
				return sc, fmt.Errorf("%s on %s, repetition %d: %w", p.name, target, rep, err)
			}
			byTarget[target] = append(byTarget[target], run)
			fmt.Fprintf(s.out, "  [%d/%d] %-20s %-9s rep %d  %s\n", done+1, total, p.name, target, rep, runLine(p, run))
			done++
		}
	}
	for _, target := range p.targets {
		runs := byTarget[target]
		sc.Targets = append(sc.Targets, TargetResult{Target: target, Runs: runs, Median: medianRun(runs)})
	}
	return sc, nil
}

// runLine is the one-line progress summary of a run.
func runLine(p plan, r Run) string {
	if p.group == groupHold {
		return fmt.Sprintf("open %d  rss %.1f -> %.1f MB  (%.1f MB/1k)  errors %d", r.OpenAtEnd, r.RSSStartMB, r.RSSEndMB, r.RSSPer1kStreamsMB, r.Errors)
	}
	s := fmt.Sprintf("rps %8.1f  p50 %7.3f  p99 %7.3f ms", r.RPS, r.P50, r.P99)
	if r.TTFCP50 > 0 {
		s += fmt.Sprintf("  ttfc %6.3f", r.TTFCP50)
	}
	s += fmt.Sprintf("  cpu/1k %.3fs  errors %d", r.CPUPer1k, r.Errors)
	return s
}

// one runs loadgen once for p on target; the first tollgate repetition of
// a scenario -profile selects is CPU-profiled too.
func (s *suite) one(ctx context.Context, p plan, target string, rep int) (Run, error) {
	var prof *profiling
	if target == targetTollgate && rep == 1 && s.profile != nil && s.profile.MatchString(p.name) {
		prof = &profiling{}
	}
	run, err := s.load(ctx, p, target, target, loadOpts{prof: prof})
	if prof != nil && prof.err != nil {
		fmt.Fprintf(s.out, "  profile: %v\n", prof.err)
	}
	return run, err
}

// profiling asks load for the gateway's CPU profile over the measured
// window; load sets file, or err when the profile could not be taken.
type profiling struct {
	file string
	err  error
}

// loadOpts are what an extra run does besides the load.
type loadOpts struct {
	// prof, when set, asks for the gateway's CPU profile.
	prof *profiling
	// pause are processes stopped for the run (see paused.go).
	pause []*procs.Proc
}

// load runs loadgen once for p on target, its files in the raw directory
// named after label; o asks for a CPU profile or paused processes.
func (s *suite) load(ctx context.Context, p plan, target, label string, o loadOpts) (Run, error) {
	prof := o.prof
	addr, pid, admin := s.st.addr(target), s.st.pid(target), s.st.gw.admin
	if p.fresh {
		in, err := s.st.startFresh(ctx, target, false)
		if err != nil {
			return Run{}, err
		}
		defer func() { _ = in.p.Stop(stopGrace) }()
		addr, pid, admin = in.addr, in.p.PID(), in.admin
		// Let the start-up garbage settle before the first sample.
		settle(ctx, []int{pid}, 2*time.Second)
	}
	var acct []int
	if target == targetTollgate || target == targetFallback {
		acct = []int{s.st.nats.PID(), s.st.budget.PID()}
	}
	// Leftover work of the previous run (events being folded, sockets
	// closing) must not run into this one.
	settle(ctx, []int{s.st.nats.PID(), s.st.budget.PID(), s.st.mock.PID(), s.st.bare.p.PID(), s.st.gw.p.PID()}, 3*time.Second)
	if len(o.pause) > 0 {
		resume, err := pause(o.pause)
		if err != nil {
			return Run{}, err
		}
		defer resume()
	}

	s.runs++
	base := fmt.Sprintf("%03d-%s-%s", s.runs, p.name, label)
	report := filepath.Join(s.rawDir, base+".json")
	path := "/v1/chat/completions"
	if slices.Contains(p.args, "-embeddings") {
		path = "/v1/embeddings"
	}
	pids := append([]int{pid}, acct...)
	if target != targetDirect {
		pids = append(pids, s.st.mock.PID())
	}
	args := []string{"-url", "http://" + addr + path, "-json", report, "-d", p.dur.String(), "-warmup", p.warmup.String()}
	for _, id := range pids {
		args = append(args, "-pid", itoa(id))
	}
	args = append(args, p.args...)
	if target == targetFallback {
		args = append(args, "-model", fallbackModel)
	}
	var wg sync.WaitGroup
	if prof != nil {
		prof.file = filepath.Join(s.rawDir, base+".pprof")
		wg.Go(func() { prof.err = s.cpuProfile(ctx, admin, p.warmup, p.dur, prof.file) })
	}
	err := s.loadgen(ctx, base, args)
	wg.Wait()
	if err != nil {
		return Run{}, err
	}
	var r loadgen.Report
	if err := readJSON(report, &r); err != nil {
		return Run{}, err
	}
	run := summarize(&r, pid, acct, target != targetDirect)
	run.Raw = base + ".json"
	return run, nil
}

// cpuProfile saves the gateway's CPU profile over the measured window,
// taken from its admin listener's pprof. A failure is the caller's to
// report and record, not to stop on.
func (s *suite) cpuProfile(ctx context.Context, admin string, wait, dur time.Duration, file string) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
	}
	secs := max(int(dur/time.Second), 1)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	err := fetchProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, secs), file)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "  profile of the gateway saved to %s (go tool pprof %s %s)\n", file, s.st.binPath("gateway"), file)
	return nil
}

// fetchProfile gets url and writes the answer to file.
func fetchProfile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("profile request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get profile: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get profile: status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	return nil
}

// loadgen runs the load generator on the load CPU with the bench token in
// its environment, its table in rawDir/base.txt.
func (s *suite) loadgen(ctx context.Context, base string, args []string) error {
	cmd := procs.Command(s.st.loadCPU, s.st.binPath("loadgen"), args...)
	cmd.Env = append(os.Environ(), "LOADGEN_TOKEN="+s.st.token)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start loadgen: %w", err)
	}
	// loadgen stops early and still reports on SIGTERM.
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	err := cmd.Wait()
	stop()
	if werr := os.WriteFile(filepath.Join(s.rawDir, base+".txt"), out.Bytes(), 0o644); werr != nil {
		return fmt.Errorf("write loadgen table: %w", werr)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("loadgen exit %d: %s", ee.ExitCode(), bytes.TrimSpace(out.Bytes()))
	}
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

// startups measures start-up time (exec to the first proxied 200) and idle
// memory (one second after that 200) on fresh processes, reps times each,
// interleaved.
func (s *suite) startups(ctx context.Context, reps int) ([]Startup, error) {
	kinds := []struct {
		name, target string
		embed        bool
	}{
		{targetBareproxy, targetBareproxy, false},
		{targetTollgate, targetTollgate, false},
		{"tollgate --embed", targetTollgate, true},
	}
	out := make([]Startup, len(kinds))
	for i, k := range kinds {
		out[i].Target = k.name
	}
	for rep := 1; rep <= reps; rep++ {
		for i, k := range kinds {
			settle(ctx, []int{s.st.nats.PID(), s.st.budget.PID()}, 2*time.Second)
			in, err := s.st.startFresh(ctx, k.target, k.embed)
			if err != nil {
				return out, fmt.Errorf("start-up of %s: %w", k.name, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			rss, rerr := rssMB(in.p.PID())
			anon, aerr := anonMB(in.p.PID())
			serr := in.p.Stop(stopGrace)
			if err := errors.Join(rerr, aerr, serr, ctx.Err()); err != nil {
				return out, fmt.Errorf("idle rss of %s: %w", k.name, err)
			}
			ms := float64(in.took) / float64(time.Millisecond)
			out[i].StartupMS = append(out[i].StartupMS, ms)
			out[i].IdleRSSMB = append(out[i].IdleRSSMB, rss)
			out[i].IdleAnonMB = append(out[i].IdleAnonMB, anon)
			fmt.Fprintf(s.out, "  start-up %-17s rep %d  %6.1f ms  idle rss %5.1f MB (anonymous %4.1f MB)\n", k.name, rep, ms, rss, anon)
		}
	}
	for i := range out {
		out[i].MedianMS = median(out[i].StartupMS)
		out[i].MedianRSS = median(out[i].IdleRSSMB)
		out[i].MedianAnon = median(out[i].IdleAnonMB)
	}
	return out, nil
}
