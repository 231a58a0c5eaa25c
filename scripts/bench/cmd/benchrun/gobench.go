package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// stage is one step of the request path and the Go benchmarks that
// measure it.
type stage struct {
	name string
	pkg  string // package directory, relative to the module root
	// bench matches benchmark names (without the -GOMAXPROCS suffix).
	bench string
}

// stages lists the hot path in request order. A stage whose package has
// no matching benchmark is reported as missing.
func stages() []stage {
	return []stage{
		{"auth: bearer token from header", "pkg/auth", "^BenchmarkBearerToken$"},
		{"auth: JWT verify", "pkg/auth", "^BenchmarkVerify"},
		{"auth: model allow-list", "pkg/auth", "^BenchmarkAllowsModel$"},
		{"request parse", "pkg/gateway", "^BenchmarkParseRequest$"},
		{"route: model lookup", "pkg/config", "^BenchmarkModel$"},
		{"route: target selection", "pkg/router", "^BenchmarkPlan$/^weighted$/^serial$"},
		{"route: a 500, then the fallback target", "pkg/router", "^BenchmarkPlanFallback$"},
		{"rate limit check", "pkg/ratelimit", "^BenchmarkAllow$"},
		{"budget check and reserve", "pkg/budget", "^BenchmarkTrackerCheckReserve$"},
		{"body edit (model, stream usage, max tokens)", "pkg/providers/openai", "Edit|Body|Build|Request|Model|Prepare"},
		{"relay: one SSE chunk", "pkg/gateway", "^BenchmarkRelayChunk$"},
		{"SSE event parse", "pkg/sse", "^BenchmarkReaderNextParse$"},
		{"usage extraction from the answer", "pkg/providers/openai", "Usage"},
		{"token estimate (no upstream usage)", "pkg/tokenize", "^Benchmark(Count|ChatPrompt)$/^(short|1KB)$"},
		{"price lookup and cost", "pkg/pricing", "^BenchmarkLookupCost$"},
		{"event id", "pkg/usage", "^BenchmarkNewEventID$"},
		{"event encode", "pkg/usage", "Encode|Marshal"},
		{"event enqueue", "pkg/usage", "^BenchmarkEnqueue"},
		{"event publish (background)", "pkg/usage", "^BenchmarkPublish$"},
		{"metrics per request", "pkg/metrics", "."},
		{"whole non-stream handler (no accounting)", "pkg/gateway", "^BenchmarkNonStreamRequest$"},
		{"baseline: bare proxy round trip", "scripts/bench/bareproxy", "."},
	}
}

// GoBench is the per-stage table of Go benchmark results.
type GoBench struct {
	Command string     `json:"command"`
	Rows    []BenchRow `json:"rows"`
	// Missing names stages without a benchmark.
	Missing []string `json:"missing,omitempty"`
	// Failures holds packages whose benchmarks did not run, with output.
	Failures []string `json:"failures,omitempty"`
}

// BenchRow is one benchmark result.
type BenchRow struct {
	Stage       string  `json:"stage"`
	Package     string  `json:"package"`
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
}

// runGoBench runs the stage benchmarks, one go test per package, each
// benchmark once for benchtime.
func runGoBench(ctx context.Context, root, benchtime string, progress io.Writer) *GoBench {
	gb := &GoBench{Command: fmt.Sprintf("go test -run '^$' -bench REGEX -benchmem -benchtime %s ./PKG", benchtime)}
	runs := benchRuns(stages())
	results := map[string][]benchResult{}
	for _, r := range runs {
		if !dirExists(root, r.pkg) {
			continue
		}
		start := time.Now()
		res, out, err := goBench(ctx, root, r.pkg, r.pattern, benchtime)
		fmt.Fprintf(progress, "  go bench %-26s %3d results  %s\n", r.pkg, len(res), time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			gb.Failures = append(gb.Failures, fmt.Sprintf("%s: %v: %s", r.pkg, err, lastLines(out, 5)))
		}
		results[r.pkg] = append(results[r.pkg], res...)
	}
	for _, st := range stages() {
		top, _, _ := strings.Cut(st.bench, "/")
		re := regexp.MustCompile(top)
		n := 0
		for _, r := range results[st.pkg] {
			name, _, _ := strings.Cut(r.name, "/")
			if !re.MatchString(name) {
				continue
			}
			gb.Rows = append(gb.Rows, BenchRow{Stage: st.name, Package: st.pkg, Name: r.name, NsPerOp: r.ns, BytesPerOp: r.bytes, AllocsPerOp: r.allocs})
			n++
		}
		if n == 0 {
			gb.Missing = append(gb.Missing, fmt.Sprintf("%s (%s)", st.name, st.pkg))
		}
	}
	return gb
}

// benchRun is one go test invocation: a package and a -bench pattern.
type benchRun struct{ pkg, pattern string }

// benchRuns groups the stages into go test invocations: one per package
// with all of its patterns joined, except that a pattern with sub-benchmark
// levels ("a/b") runs on its own, since go test splits the whole
// expression at each slash.
func benchRuns(sts []stage) []benchRun {
	var runs []benchRun
	joined := map[string]int{} // package -> index in runs of its joined run
	for _, st := range sts {
		if strings.Contains(st.bench, "/") {
			runs = append(runs, benchRun{st.pkg, st.bench})
			continue
		}
		if i, ok := joined[st.pkg]; ok {
			runs[i].pattern += "|" + st.bench
			continue
		}
		joined[st.pkg] = len(runs)
		runs = append(runs, benchRun{st.pkg, st.bench})
	}
	return runs
}

// benchResult is one parsed benchmark line.
type benchResult struct {
	name              string
	ns, bytes, allocs float64
}

// goBench runs the benchmarks of one package matching pattern.
func goBench(ctx context.Context, root, pkg, pattern, benchtime string) ([]benchResult, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", pattern, "-benchmem", "-benchtime", benchtime, "-count", "1", "./"+pkg)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	res := parseBench(out)
	if err != nil {
		return res, out, fmt.Errorf("go test: %w", err)
	}
	return res, out, nil
}

// parseBench reads `go test -bench -benchmem` output.
func parseBench(out []byte) []benchResult {
	var res []benchResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue // a log line that starts with a benchmark name
		}
		r := benchResult{name: trimProcs(f[0])}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.ns = v
			case "B/op":
				r.bytes = v
			case "allocs/op":
				r.allocs = v
			}
		}
		res = append(res, r)
	}
	return res
}

// trimProcs removes the -GOMAXPROCS suffix of a benchmark name.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}

// dirExists reports whether root/dir is a directory.
func dirExists(root, dir string) bool {
	fi, err := os.Stat(filepath.Join(root, dir))
	return err == nil && fi.IsDir()
}

// lastLines returns the last n lines of b.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
