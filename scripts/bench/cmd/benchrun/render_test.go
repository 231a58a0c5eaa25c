package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseBench(t *testing.T) {
	out := []byte(`goos: linux
goarch: amd64
pkg: github.com/tollgate/tollgate/pkg/auth
cpu: AMD EPYC
BenchmarkVerify/HS256_cached-2         	 1000000	       212.5 ns/op	      48 B/op	       1 allocs/op
BenchmarkBearerToken-2                 	 9000000	        11.20 ns/op	       0 B/op	       0 allocs/op
BenchmarkPropagation-2                 	     100	   1234567 ns/op	   1500 events/s	     900 B/op	      12 allocs/op
BenchmarkBroken-2 some log line that is not a result
BenchmarkNoProcs 	 50	 20 ns/op
--- FAIL: BenchmarkOther
FAIL
`)
	want := []benchResult{
		{"BenchmarkVerify/HS256_cached", 212.5, 48, 1},
		{"BenchmarkBearerToken", 11.2, 0, 0},
		{"BenchmarkPropagation", 1234567, 900, 12},
		{"BenchmarkNoProcs", 20, 0, 0},
	}
	got := parseBench(out)
	if len(got) != len(want) {
		t.Fatalf("parsed %d results, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		t.Run(want[i].name, func(t *testing.T) {
			if got[i] != want[i] {
				t.Errorf("got %+v, want %+v", got[i], want[i])
			}
		})
	}
}

func TestBenchRuns(t *testing.T) {
	tests := []struct {
		name string
		in   []stage
		want []benchRun
	}{
		{
			name: "patterns of a package are joined",
			in:   []stage{{"a", "pkg/x", "^A$"}, {"b", "pkg/y", "^B$"}, {"c", "pkg/x", "^C$"}},
			want: []benchRun{{"pkg/x", "^A$|^C$"}, {"pkg/y", "^B$"}},
		},
		{
			name: "a pattern with levels runs alone",
			in:   []stage{{"a", "pkg/x", "^A$/^sub$"}, {"b", "pkg/x", "^B$"}, {"c", "pkg/x", "^C$"}},
			want: []benchRun{{"pkg/x", "^A$/^sub$"}, {"pkg/x", "^B$|^C$"}},
		},
		{name: "none", in: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := benchRuns(tt.in)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("run %d: got %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestTrimProcs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"BenchmarkX-2", "BenchmarkX"},
		{"BenchmarkX/sub-case-16", "BenchmarkX/sub-case"},
		{"BenchmarkX/sub-case", "BenchmarkX/sub-case"},
		{"BenchmarkX", "BenchmarkX"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := trimProcs(tt.in); got != tt.want {
				t.Errorf("trimProcs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestNiceCeil(t *testing.T) {
	tests := []struct {
		name    string
		in, out float64
	}{
		{"zero", 0, 1},
		{"negative", -3, 1},
		{"NaN", math.NaN(), 1},
		{"exact power", 100, 100},
		{"up to 1.5", 130, 150},
		{"up to 3", 25785, 30000},
		{"up to 5", 4100, 5000},
		{"up to 8", 7.5, 8},
		{"up to 10", 8.5, 10},
		{"small", 0.034, 0.04},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := niceCeil(tt.in); math.Abs(got-tt.out) > 1e-12 {
				t.Errorf("niceCeil(%v) = %v, want %v", tt.in, got, tt.out)
			}
		})
	}
}

// svgCounts parses an SVG document and counts its elements by name.
func svgCounts(t *testing.T, b []byte) map[string]int {
	t.Helper()
	counts := map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return counts
		}
		if err != nil {
			t.Fatalf("svg is not well-formed XML: %v\n%s", err, b)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
}

func TestBarChartSVG(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name      string
		chart     barChart
		wantBars  int
		wantTexts []string
	}{
		{
			name: "three series, one missing value",
			chart: barChart{title: "Throughput <rps> & more", yLabel: "req/s", groups: []string{"1 client", "8 clients"}, series: []series{
				{name: "direct", color: "#999", values: []float64{100, 200}},
				{name: "bareproxy", color: "#00f", values: []float64{90, nan}},
				{name: "tollgate", color: "#f80", values: []float64{80, 150}},
			}},
			wantBars:  5,
			wantTexts: []string{"Throughput &lt;rps&gt; &amp; more", "8 clients", "tollgate"},
		},
		{
			name:     "all zero",
			chart:    barChart{title: "t", groups: []string{"a"}, series: []series{{name: "s", values: []float64{0}}}},
			wantBars: 1,
		},
		{
			name:  "empty",
			chart: barChart{title: "t"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.chart.svg()
			counts := svgCounts(t, b)
			// rects: background, bars, one legend swatch per series.
			if got, want := counts["rect"], 1+tt.wantBars+len(tt.chart.series); got != want {
				t.Errorf("%d rect elements, want %d", got, want)
			}
			for _, s := range tt.wantTexts {
				if !bytes.Contains(b, []byte(s)) {
					t.Errorf("svg lacks %q", s)
				}
			}
		})
	}
}

// sampleResults is a run with known figures for the rendering tests.
func sampleResults() *Results {
	tr := func(target string, m Run) TargetResult {
		return TargetResult{Target: target, Runs: []Run{m}, Median: m}
	}
	sc := func(name, group string, x float64, d, b, g Run) Scenario {
		return Scenario{Name: name, Group: group, Title: name, X: x, Targets: []TargetResult{
			tr(targetDirect, d), tr(targetBareproxy, b), tr(targetTollgate, g),
		}}
	}
	return &Results{
		Version: resultsVersion, Started: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), Finished: time.Date(2026, 1, 2, 3, 16, 0, 0, time.UTC),
		Machine:  Machine{CPUs: 2, CPUModel: "Test CPU", Commit: "abc1234"},
		Settings: Settings{Command: "benchrun", Reps: 3, Pinned: true, GatewayCPU: "0", LoadCPU: "1"},
		Scenarios: []Scenario{
			sc("nonstream-c1", groupNonStream, 1, Run{RPS: 5000, P50: 0.1, P99: 0.3}, Run{RPS: 3000, P50: 0.2, P99: 0.5}, Run{RPS: 2800, P50: 0.22, P99: 0.6}),
			sc("nonstream-c8", groupNonStream, 8, Run{RPS: 9000}, Run{RPS: 10000, LoadCores: 1, CPUPer1k: 0.02}, Run{RPS: 9000, LoadCores: 0.99, CPUPer1k: 0.025, AcctCPUPer1k: 0.005}),
			sc("nonstream-c32", groupNonStream, 32, Run{RPS: 9000}, Run{RPS: 10000, CPUPer1k: 0.02}, Run{RPS: 5000, CPUPer1k: 0.03, Errors: 3, ErrorsByKind: map[string]int64{"status_5xx": 3}}),
			sc("stream-c1", groupStream, 1, Run{RPS: 900, TTFCP50: 0.3}, Run{RPS: 600, TTFCP50: 0.5}, Run{RPS: 500, TTFCP50: 0.55}),
			sc("stream-c64", groupStream, 64, Run{RPS: 1000}, Run{RPS: 1000}, Run{RPS: 950}),
			sc("open-300ms-r500", groupOpen, 500, Run{RPS: 500, P99: 302}, Run{RPS: 500, P99: 303}, Run{RPS: 500, P99: 305}),
			sc("open-300ms-r2000", groupOpen, 2000, Run{RPS: 2000, P99: 310}, Run{RPS: 1500, P99: 900, Errors: 10}, Run{RPS: 1400, P99: 950, Errors: 20}),
			{Name: "fallback-500-c16", Group: groupFallback, X: 16, Targets: []TargetResult{
				tr(targetTollgate, Run{RPS: 4000, P50: 3}),
				tr(targetFallback, Run{RPS: 1900, P50: 7}),
			}},
			sc("cpu-r1000", groupCPU, 1000, Run{CPUPer1k: 0.05}, Run{CPUPer1k: 0.10}, Run{CPUPer1k: 0.20, AcctCPUPer1k: 0.04}),
			sc("cpu-r100", groupCPU, 100, Run{CPUPer1k: 0.1}, Run{CPUPer1k: 0.20}, Run{CPUPer1k: 0.24, AcctCPUPer1k: 0.04}),
			{Name: "hold-1000", Group: groupHold, X: 1000, Targets: []TargetResult{
				tr(targetBareproxy, Run{RSSStartMB: 8, RSSEndMB: 30, RSSPer1kStreamsMB: 22, OpenAtEnd: 1000}),
				tr(targetTollgate, Run{RSSStartMB: 20, RSSEndMB: 45, RSSPer1kStreamsMB: 25, OpenAtEnd: 1000}),
			}},
		},
		Startup: []Startup{
			{Target: targetBareproxy, StartupMS: []float64{5}, IdleRSSMB: []float64{8}, MedianMS: 5, MedianRSS: 8},
			{Target: targetTollgate, StartupMS: []float64{40}, IdleRSSMB: []float64{25}, MedianMS: 40, MedianRSS: 25},
		},
		Pending: []Pending{{Name: "Some scenario", Reason: "pending (its feature has not landed)"}},
		GoBench: &GoBench{Command: "go test", Rows: []BenchRow{{Stage: "auth: JWT verify", Package: "pkg/auth", Name: "BenchmarkVerify/HS256_cached", NsPerOp: 210, BytesPerOp: 48, AllocsPerOp: 1}},
			Missing: []string{"body edit (pkg/providers/openai)"}},
	}
}

func TestEvaluate(t *testing.T) {
	got := map[string]check{}
	for _, c := range evaluate(sampleResults()) {
		got[c.Goal] = c
	}
	tests := []struct {
		goal    string
		verdict string
	}{
		{"Non-stream throughput at 8 clients >= 0.85 x bareproxy", verdictMet},
		{"Non-stream throughput at 32 clients >= 0.85 x bareproxy", verdictMissed},
		{"Added latency at 1 client: p50 <= bareproxy + 0.03 ms", verdictMet},
		{"Added latency at 1 client: p99 <= bareproxy + 0.2 ms", verdictMet},
		{"Streams at 64 clients >= 0.9 x bareproxy", verdictMet},
		{"Time to first chunk (p50, 1 client) <= bareproxy + 0.1 ms", verdictMet},
		{"Open loop 500 req/s, 300 ms upstream: 0 errors, p99 within 10 ms of bareproxy", verdictMet},
		{"Open loop 2000 req/s, 300 ms upstream: 0 errors, p99 within 10 ms of bareproxy", verdictNA},
		{"CPU per 1,000 requests at 1000 req/s <= 1.25 x bareproxy", verdictMissed},
		{"CPU per 1,000 requests at 100 req/s <= 1.25 x bareproxy", verdictMet},
		{"Serving CPU per request at 32 clients (saturated) <= 1.25 x bareproxy", verdictMissed},
		{"Peak RSS in the open loop at 2,000 req/s, 300 ms upstream <= 1.3 x bareproxy", verdictNA},
		{"Fallback after upstream 500, 16 clients: >= 0.45 x the throughput without failures", verdictMet},
		{"Idle RSS <= 20 MB", verdictMissed},
		{"Idle RSS with --embed <= 64 MB", verdictNA},
		{"RSS per 1,000 concurrent streams <= 30 MB", verdictMet},
		{"Start-up to the first proxied response < 100 ms", verdictMet},
	}
	for _, tt := range tests {
		t.Run(tt.goal, func(t *testing.T) {
			c, ok := got[tt.goal]
			if !ok {
				t.Fatalf("no check; have %v", got)
			}
			if c.Verdict != tt.verdict {
				t.Errorf("verdict %q (%s), want %q", c.Verdict, c.Measured, tt.verdict)
			}
		})
	}
}

func TestRender(t *testing.T) {
	tests := []struct {
		name     string
		soak     *Soak
		profiles []*Profile
		paused   []*Paused
		want     []string
		notWant  []string
	}{
		{
			name: "without soak",
			want: []string{
				"# Benchmarks", "## Headline", "## Targets", "## Method", "## Machine", "## Reproduce",
				"| Non-stream req/s, 8 clients | 9000 | 10000 | 9000 | 0.90× |",
				"![Non-stream requests per second by client count](docs/bench/nonstream-rps.svg)",
				"pending (its feature has not landed)", "Test CPU", "| tollgate-fallback | 1900 | 0.47× |", "make bench", "**3** (status_5xx 3)",
				"Stages without a benchmark yet: body edit (pkg/providers/openai)",
				"Not run yet: `make bench-soak`",
				"[docs/performance.md](docs/performance.md), kept by hand",
			},
			notWant: []string{"/tmp/", "/work/", "NaN"},
		},
		{
			name: "with soak",
			soak: &Soak{Target: targetTollgate, Rate: 200, DurationS: 180, Run: Run{Requests: 36000, RPS: 200, P99: 1250}},
			want: []string{"200 streams/s (open loop) for 3m0s", "| tollgate | 36000 | 200 |"},
		},
		{
			name:    "without profile",
			want:    []string{"## Gateway CPU profiles", "Not taken in this run", "`nonstream-c1`, `nonstream-c8`, `nonstream-c32`, `stream-c64`, `cpu-r1000`, `cpu-r100`, `large-64k-c8`, `large-512k-c8`"},
			notWant: []string{"profile-nonstream-c32.txt", "[cpu-r1000]"},
		},
		{
			name: "with profiles",
			profiles: []*Profile{
				{Scenario: "nonstream-c8", Title: "Non-stream, instant upstream, 8 clients", WindowS: 5, File: profileFile("nonstream-c8")},
				{Scenario: "nonstream-c32", Title: "Non-stream, instant upstream, 32 clients", WindowS: 5, File: profileFile("nonstream-c32")},
				{Scenario: "cpu-r1000", WindowS: 5, Error: "get profile: connection refused"},
			},
			want: []string{"- [docs/bench/profile-nonstream-c32.txt](docs/bench/profile-nonstream-c32.txt): `nonstream-c32` (Non-stream, instant upstream, 32 clients), a 5s run.",
				"an extra run of its scenario on tollgate after the scenario's measured repetitions",
				"- `cpu-r1000`: could not be taken in this run: get profile: connection refused.",
				// Each throughput target links the profile of its own
				// scenario, and says where each request's CPU went on the
				// load CPU (accounting's share of it) and in the serving
				// process.
				"| Non-stream throughput at 8 clients >= 0.85 x bareproxy | 0.90 x (9000 vs 10000 req/s); CPU µs per request: load CPU 110.0 vs 100.0 (0.99 vs 1.00 cores busy; nats-server + budget 5.0 of it), serving process 25.0 vs 20.0 | met | [nonstream-c8](docs/bench/profile-nonstream-c8.txt) |",
				"| Non-stream throughput at 32 clients >= 0.85 x bareproxy | 0.50 x (5000 vs 10000 req/s); CPU µs per request: load CPU 0.0 vs 0.0 (0.00 vs 0.00 cores busy; nats-server + budget 0.0 of it), serving process 30.0 vs 20.0 | **missed** | [nonstream-c32](docs/bench/profile-nonstream-c32.txt) |",
				// A target whose scenario was not profiled links nothing.
				"| Added latency at 1 client: p99 <= bareproxy + 0.2 ms | +0.100 ms (0.600 vs 0.500) | met | - |",
			},
			// A profile that was not taken is linked nowhere.
			notWant: []string{"profile-cpu-r1000.txt", "[cpu-r1000]"},
		},
		{
			name: "without paused runs",
			want: []string{"## Runs with the accounting servers paused\n\nNone in this run.",
				"| Streams at 64 clients >= 0.9 x bareproxy | 0.95 x (950 vs 1000 streams/s); CPU µs per request: load CPU 0.0 vs 0.0",
				// The absolute memory goal is set beside bareproxy's own figure.
				"| RSS per 1,000 concurrent streams <= 30 MB | 26.2 MB at 1000 streams (bareproxy: 23.1 MB at 1000) | met |"},
			notWant: []string{"extra runs, median"},
		},
		{
			name: "with paused runs",
			paused: []*Paused{
				{Scenario: "nonstream-c1", Paused: []string{pauseNATS, pauseBudget}, Run: &Run{RPS: 2900, P50: 0.21, P99: 0.52, CPUPer1k: 0.05, LoadCores: 0.9}},
				// A results file of an earlier plan: the section shows the
				// run, its target row does not (a NATS stall at saturation).
				{Scenario: "nonstream-c8", Paused: []string{pauseNATS, pauseBudget}, Run: &Run{RPS: 9500}},
				{Scenario: "cpu-r100", Paused: []string{pauseBudget}, Run: &Run{CPUPer1k: 0.22}},
				// Errors in a paused run void its figure.
				{Scenario: "cpu-r1000", Paused: []string{pauseBudget}, Run: &Run{CPUPer1k: 0.12, Errors: 2}},
				{Scenario: "stream-c64", Paused: []string{pauseNATS, pauseBudget}, Error: "pause nats-server: no such process"},
			},
			want: []string{
				// The latency target: the paused p99 against bareproxy's.
				"| Added latency at 1 client: p99 <= bareproxy + 0.2 ms | +0.100 ms (0.600 vs 0.500); with nats-server and budget paused (extra runs, median): p99 0.520 ms, +0.020 ms against bareproxy's median | met |",
				"0.90 x (9000 vs 10000 req/s); CPU µs per request: load CPU 110.0 vs 100.0 (0.99 vs 1.00 cores busy; nats-server + budget 5.0 of it), serving process 25.0 vs 20.0 | met |",
				"| CPU per 1,000 requests at 100 req/s <= 1.25 x bareproxy | 1.20 x (0.240 vs 0.200 CPU s); with budget paused (extra runs, median): 0.220 CPU s, 1.10 x against bareproxy's median | met |",
				// The section sets each run beside the medians; a failed run
				// says why.
				"| nonstream-c1 | nats-server and budget | 2900 | 0.210 | 0.520 | 0.050 | 0.90 | 0 | 2800, 0.600, 0.000 | 3000, 0.500, 0.000 |",
				"| stream-c64 | nats-server and budget | failed: pause nats-server: no such process |",
				"2.00 x (0.200 vs 0.100 CPU s); the extra runs with budget paused had 2 errors, so they say nothing here | **missed** |",
			},
			notWant: []string{"9500 req/s, ", "streams/s, ", "None in this run."},
		},
		{
			name: "with a failed paused run",
			paused: []*Paused{
				{Scenario: "nonstream-c1", Paused: []string{pauseNATS, pauseBudget}, Error: "pause nats-server: no such process"},
			},
			want: []string{
				"| nonstream-c1 | nats-server and budget | failed: pause nats-server: no such process |",
				// A failed paused run adds nothing to its target.
				"| Added latency at 1 client: p99 <= bareproxy + 0.2 ms | +0.100 ms (0.600 vs 0.500) | met |",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := sampleResults()
			res.Profiles = tt.profiles
			res.Paused = tt.paused
			out := string(render(res, tt.soak, "docs/bench"))
			for _, s := range tt.want {
				if !strings.Contains(out, s) {
					t.Errorf("markdown lacks %q", s)
				}
			}
			for _, s := range tt.notWant {
				if strings.Contains(out, s) {
					t.Errorf("markdown contains %q", s)
				}
			}
		})
	}
	t.Run("every chart is valid SVG", func(t *testing.T) {
		cs := charts(sampleResults())
		if len(cs) < 5 {
			t.Errorf("%d charts, want at least 5", len(cs))
		}
		for _, c := range cs {
			svgCounts(t, c.chart.svg())
		}
	})
}

// TestPairedComparison: a target compares tollgate with bareproxy within
// each repetition and takes the median of those, so a repetition in which
// the machine ran slow for both does not move the verdict, as it would in
// a ratio of the two medians.
func TestPairedComparison(t *testing.T) {
	runs := func(target string, v ...float64) TargetResult {
		tr := TargetResult{Target: target}
		for _, x := range v {
			tr.Runs = append(tr.Runs, Run{RPS: x, P99: 1000 / x})
		}
		tr.Median = medianRun(tr.Runs)
		return tr
	}
	r := &Results{Scenarios: []Scenario{
		// Per repetition 0.95, 0.75 and 0.97; the medians' ratio is
		// 150/200 = 0.75.
		{Name: "nonstream-c8", Group: groupNonStream, X: 8, Targets: []TargetResult{
			runs(targetBareproxy, 100, 200, 300), runs(targetTollgate, 95, 150, 290),
		}},
		{Name: "nonstream-c1", Group: groupNonStream, X: 1, Targets: []TargetResult{
			runs(targetBareproxy, 100, 200, 300), runs(targetTollgate, 95, 150, 290),
		}},
	}}
	got, ok := r.paired("nonstream-c8", targetTollgate, targetBareproxy, rpsOf, byRatio)
	if !ok || math.Abs(got-0.95) > 1e-9 {
		t.Fatalf("paired ratio %v, %v; want 0.95", got, ok)
	}
	// p99: 10.526-10, 6.667-5, 3.448-3.333: median 0.526.
	if d, ok := r.paired("nonstream-c1", targetTollgate, targetBareproxy, p99Of, byDiff); !ok || math.Abs(d-(1000.0/95-10)) > 1e-9 {
		t.Fatalf("paired difference %v, %v", d, ok)
	}
	if _, ok := r.paired("nonstream-c8", targetTollgate, targetFallback, rpsOf, byRatio); ok {
		t.Fatal("paired found a target the scenario does not have")
	}
	for _, c := range evaluate(r) {
		if c.Goal == "Non-stream throughput at 8 clients >= 0.85 x bareproxy" {
			if c.Verdict != verdictMet || !strings.HasPrefix(c.Measured, "0.95 x (150 vs 200 req/s)") {
				t.Fatalf("check %+v", c)
			}
			return
		}
	}
	t.Fatal("no throughput check at 8 clients")
}

// TestMegabytes: the memory goals are in MB and RSS is read in MiB, so an
// idle RSS of 19.39 MiB (20.33 MB) misses a 20 MB goal.
func TestMegabytes(t *testing.T) {
	if mb := megabytes(19.39); mb <= 20 || mb > 20.34 {
		t.Errorf("19.39 MiB = %.3f MB, want 20.33", mb)
	}
}
