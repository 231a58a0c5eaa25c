package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// The gateway's CPU profiles (issue #12): after the measured repetitions of
// each of profileScenarios the suite runs that scenario once more on the
// gateway, takes a CPU profile from its admin listener during that extra
// run, and writes the profile's top next to latest.json, so that the next
// change to the request path starts from data, and a target missed on the
// gateway's CPU links the profile of the scenario that measured it. The
// extra runs are in no table: profiling takes CPU from the gateway (a
// signal and a stack walk per sample), and none of the measured figures
// pays for it.

// profileScenarios are the scenarios whose gateway profile is kept: one for
// each target compared with bareproxy on throughput, latency or CPU
// (throughput at 8 and 32 clients, latency at one client, streams, CPU at
// a fixed request rate, CPU with large bodies).
var profileScenarios = []string{"nonstream-c1", "nonstream-c8", "nonstream-c32", "stream-c64", "cpu-r1000", "cpu-r100", "large-64k-c8", "large-512k-c8"}

// profiled reports whether scenario name gets an extra profiled run.
func profiled(name string) bool { return slices.Contains(profileScenarios, name) }

const (
	// profileMinWindow is the shortest profiled window (at 100 samples per
	// second, 500 samples).
	profileMinWindow = 5 * time.Second
	// profileTopN is how many functions the top lists.
	profileTopN = 40
)

// Profile is the gateway's CPU profile top of a run.
type Profile struct {
	Scenario string `json:"scenario"`
	Title    string `json:"title"`
	// WindowS is the profiled window in seconds.
	WindowS float64 `json:"window_s"`
	// File is the top's file name in the results directory; empty when
	// the profile could not be taken.
	File string `json:"file,omitempty"`
	// Error says why the profile could not be taken.
	Error string `json:"error,omitempty"`
}

// profileFile is the name of a scenario's profile top.
func profileFile(scenario string) string { return "profile-" + scenario + ".txt" }

// profilePlan is p with the profiled run's window.
func profilePlan(p plan) plan {
	p.dur = max(p.dur, profileMinWindow)
	return p
}

// profileRun runs p once more on the gateway, not measured, while taking
// its CPU profile. It returns what to record and the top to write with the
// results (nil when the profile could not be taken); a failure is reported
// and recorded, never returned, so that the suite still finishes.
func (s *suite) profileRun(ctx context.Context, p plan, commit string) (*Profile, []byte) {
	p = profilePlan(p)
	pr := &Profile{Scenario: p.name, Title: p.title, WindowS: p.dur.Seconds()}
	fmt.Fprintf(s.out, "  extra run of %s on %s for its CPU profile (%s, not measured)\n", p.name, targetTollgate, p.dur)
	prof := &profiling{}
	_, err := s.load(ctx, p, targetTollgate, targetTollgate+"-profiled", loadOpts{prof: prof})
	err = cmp.Or(err, prof.err)
	var top []byte
	if err == nil {
		var b []byte
		b, err = profileTopFile(prof.file)
		top = append([]byte(profileIntro(pr, commit)), b...)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(s.rawDir, profileFile(p.name)), top, 0o644)
	}
	if err != nil {
		pr.Error = err.Error()
		fmt.Fprintf(s.out, "  the gateway's CPU profile was not taken: %v\n", err)
		return pr, nil
	}
	pr.File = profileFile(p.name)
	return pr, top
}

// profileIntro is the text above the top: what was profiled and how.
func profileIntro(pr *Profile, commit string) string {
	return fmt.Sprintf("Gateway CPU profile while serving %s (%s), commit %s.\n"+
		"Written by `make bench` (scripts/bench/cmd/benchrun): an extra %s run of the scenario on the\n"+
		"gateway after its measured repetitions, profiled over that window from the admin listener's\n"+
		"/debug/pprof/profile; the figures in BENCHMARKS.md come from the measured runs alone.\n"+
		"The top %d functions by their own CPU time (flat), then by the time including their callees\n"+
		"(cum); the raw profile stays in bench-results/ (not committed).\n\n",
		pr.Scenario, pr.Title, commit, time.Duration(pr.WindowS*float64(time.Second)), profileTopN)
}

// profileTopFile reads a pprof profile and returns its top.
func profileTopFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read profile: %w", err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("parse profile %s: %w", filepath.Base(file), err)
	}
	return profileTop(p, profileTopN)
}

// funcTime is one function's share of a profile.
type funcTime struct {
	name      string
	flat, cum int64
}

// profileTop formats p as `go tool pprof -top` does, by function: a header
// (type, time, duration and total samples), then the n functions with the
// most flat time, then (as with -cum) the n with the most cum time. Flat is
// the time in the function itself (the innermost frame, an inlined function
// counted as its own), cum the time of the samples it appears in at all.
func profileTop(p *profile.Profile, n int) ([]byte, error) {
	if len(p.SampleType) == 0 {
		return nil, errors.New("profile has no sample types")
	}
	idx := len(p.SampleType) - 1 // pprof's default, and "cpu" in a Go CPU profile
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	fs, total := funcTimes(p, idx)
	if total == 0 {
		return nil, errors.New("profile has no samples")
	}
	t := topTable{unit: p.SampleType[idx].Unit, total: total}
	var b strings.Builder
	if len(p.Mapping) > 0 && p.Mapping[0].File != "" {
		fmt.Fprintf(&b, "File: %s\n", filepath.Base(p.Mapping[0].File))
	}
	fmt.Fprintf(&b, "Type: %s\n", p.SampleType[idx].Type)
	if p.TimeNanos != 0 {
		fmt.Fprintf(&b, "Time: %s\n", time.Unix(0, p.TimeNanos).UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if p.DurationNanos > 0 {
		fmt.Fprintf(&b, "Duration: %s, ", time.Duration(p.DurationNanos).Round(10*time.Millisecond))
		fmt.Fprintf(&b, "Total samples = %s (%.2f%%)\n", t.value(total), 100*float64(total)/float64(p.DurationNanos))
	} else {
		fmt.Fprintf(&b, "Total samples = %s\n", t.value(total))
	}
	b.WriteString("\nBy flat time (go tool pprof -top):\n")
	t.write(&b, fs, n)
	slices.SortStableFunc(fs, func(a, b funcTime) int { return cmp.Compare(b.cum, a.cum) })
	b.WriteString("\nBy cum time (go tool pprof -top -cum):\n")
	t.write(&b, fs, n)
	return []byte(b.String()), nil
}

// topTable writes a profile's tables, every value in one scale: seconds
// when the total is a second or more, as pprof does.
type topTable struct {
	unit  string
	total int64
}

// write writes the first n of fs.
func (t topTable) write(b *strings.Builder, fs []funcTime, n int) {
	shown := fs[:min(n, len(fs))]
	var sum int64
	for _, f := range shown {
		sum += f.flat
	}
	fmt.Fprintf(b, "Showing top %d of %d functions, accounting for %s, %s of %s total\n",
		len(shown), len(fs), t.value(sum), t.pct(sum), t.value(t.total))
	fmt.Fprintf(b, "%10s %6s %6s %10s %6s\n", "flat", "flat%", "sum%", "cum", "cum%")
	sum = 0
	for _, f := range shown {
		sum += f.flat
		fmt.Fprintf(b, "%10s %6s %6s %10s %6s  %s\n", t.value(f.flat), t.pct(f.flat), t.pct(sum), t.value(f.cum), t.pct(f.cum), f.name)
	}
}

// value formats a sample value: CPU time in seconds, or in milliseconds
// when the total is under a second; other units as a count.
func (t topTable) value(v int64) string {
	switch {
	case v == 0:
		return "0"
	case t.unit != "nanoseconds":
		return strconv.FormatInt(v, 10)
	case t.total >= int64(time.Second):
		return strconv.FormatFloat(float64(v)/1e9, 'f', 2, 64) + "s"
	}
	return strconv.FormatFloat(math.Round(float64(v)/1e4)/100, 'f', -1, 64) + "ms"
}

// pct formats v as a percentage of the total.
func (t topTable) pct(v int64) string {
	if v == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(v)/float64(t.total), 'f', 2, 64) + "%"
}

// funcTimes sums sample value idx of p by function, most flat time first
// (then most cum time, then by name), and returns the total.
func funcTimes(p *profile.Profile, idx int) ([]funcTime, int64) {
	byName := map[string]*funcTime{}
	var total int64
	seen := map[string]bool{}
	for _, s := range p.Sample {
		if idx >= len(s.Value) {
			continue
		}
		v := s.Value[idx]
		total += v
		clear(seen)
		for i, loc := range s.Location {
			for j, name := range frameNames(loc) {
				f := byName[name]
				if f == nil {
					f = &funcTime{name: name}
					byName[name] = f
				}
				if i == 0 && j == 0 {
					f.flat += v
				}
				if !seen[name] { // a recursive function counts once
					seen[name] = true
					f.cum += v
				}
			}
		}
	}
	fs := make([]funcTime, 0, len(byName))
	for _, f := range byName {
		fs = append(fs, *f)
	}
	slices.SortFunc(fs, func(a, b funcTime) int {
		return cmp.Or(cmp.Compare(b.flat, a.flat), cmp.Compare(b.cum, a.cum), strings.Compare(a.name, b.name))
	})
	return fs, total
}

// frameNames are the functions of a location, innermost (inlined) first;
// an unsymbolized location is its address.
func frameNames(loc *profile.Location) []string {
	var names []string
	for _, l := range loc.Line {
		if l.Function != nil && l.Function.Name != "" {
			names = append(names, l.Function.Name)
		}
	}
	if len(names) == 0 {
		names = append(names, "0x"+strconv.FormatUint(loc.Address, 16))
	}
	return names
}
