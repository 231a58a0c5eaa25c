package main

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/loadgen"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"one", []float64{7}, 7},
		{"odd unsorted", []float64{5, 1, 3}, 3},
		{"even takes the mean of the middle two", []float64{4, 1, 3, 2}, 2.5},
		{"outlier ignored", []float64{1, 1000, 2}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			if got := median(tt.in); got != tt.want {
				t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
			}
			if !slices.Equal(in, tt.in) {
				t.Errorf("median modified its input: %v, was %v", tt.in, in)
			}
		})
	}
}

func TestMedianRun(t *testing.T) {
	tests := []struct {
		name string
		runs []Run
		want Run
	}{
		{name: "none", runs: nil, want: Run{}},
		{
			name: "figures take the median, errors the sum",
			runs: []Run{
				{RPS: 100, P50: 1, P99: 9, Requests: 10, Errors: 1, ErrorsByKind: map[string]int64{"status_5xx": 1}},
				{RPS: 300, P50: 3, P99: 5, Requests: 30},
				{RPS: 200, P50: 2, P99: 7, Requests: 20, Errors: 2, ErrorsByKind: map[string]int64{"status_5xx": 1, "cut": 1}},
			},
			want: Run{RPS: 200, P50: 2, P99: 7, Requests: 20, Errors: 3, ErrorsByKind: map[string]int64{"status_5xx": 2, "cut": 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := medianRun(tt.runs)
			if got.RPS != tt.want.RPS || got.P50 != tt.want.P50 || got.P99 != tt.want.P99 || got.Requests != tt.want.Requests || got.Errors != tt.want.Errors {
				t.Errorf("medianRun = %+v, want %+v", got, tt.want)
			}
			if len(got.ErrorsByKind) != len(tt.want.ErrorsByKind) {
				t.Fatalf("errors by kind = %v, want %v", got.ErrorsByKind, tt.want.ErrorsByKind)
			}
			for k, n := range tt.want.ErrorsByKind {
				if got.ErrorsByKind[k] != n {
					t.Errorf("errors by kind[%s] = %d, want %d", k, got.ErrorsByKind[k], n)
				}
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	rep := &loadgen.Report{
		Requests: 1000, Errors: 2, RPS: 333, ErrorsByKind: map[string]int64{"timeout": 2},
		Latency: loadgen.Latency{P50MS: 1, P90MS: 2, P99MS: 3, P999MS: 4, MaxMS: 5},
		TTFC:    &loadgen.Latency{P50MS: 0.5, P99MS: 0.9},
		Procs: []loadgen.Proc{
			{PID: 1, Self: true, CPUPer1kRequests: 9, Cores: 0.25},
			{PID: 10, CPUPer1kRequests: 0.2, Cores: 0.7, PeakRSSMB: 30, RSSStartMB: 20, RSSEndMB: 25, RSSPer1kStreamsMB: 5},
			{PID: 20, CPUPer1kRequests: 0.05, Cores: 0.1},
			{PID: 21, CPUPer1kRequests: 0.03, Cores: 0.05},
			{PID: 30, CPUPer1kRequests: 0.1, Cores: 0.3}, // the mock: neither target nor accounting
		},
	}
	tests := []struct {
		name     string
		target   int
		acct     []int
		pinned   bool
		wantCPU  float64
		wantAcct float64
		wantLoad float64
	}{
		{"gateway with accounting processes", 10, []int{20, 21}, true, 0.2, 0.08, 0.7},
		{"proxy without accounting", 10, nil, true, 0.2, 0, 0.7},
		{"target on the load CPU", 10, nil, false, 0.2, 0, 1.4},
		{"unknown target", 99, nil, true, 0, 0, 1.4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := summarize(rep, tt.target, tt.acct, tt.pinned)
			if r.CPUPer1k != tt.wantCPU || math.Abs(r.AcctCPUPer1k-tt.wantAcct) > 1e-9 {
				t.Errorf("cpu %v acct %v, want %v and %v", r.CPUPer1k, r.AcctCPUPer1k, tt.wantCPU, tt.wantAcct)
			}
			if math.Abs(r.LoadCores-tt.wantLoad) > 1e-9 {
				t.Errorf("load cores %v, want %v", r.LoadCores, tt.wantLoad)
			}
			if r.P99 != 3 || r.TTFCP50 != 0.5 || r.Errors != 2 || r.ErrorsByKind["timeout"] != 2 || r.RPS != 333 {
				t.Errorf("summary %+v does not carry the report's figures", r)
			}
		})
	}
}

func TestPlans(t *testing.T) {
	tm := timing{warmup: 500 * time.Millisecond, dur: 3 * time.Second, holdDur: 3 * time.Second, cpuDur: 4 * time.Second}
	ps := plans(tm)
	byName := map[string]plan{}
	for _, p := range ps {
		if _, dup := byName[p.name]; dup {
			t.Errorf("scenario %s appears twice", p.name)
		}
		byName[p.name] = p
	}
	// Every scenario of the brief that can run today.
	for _, name := range []string{
		"nonstream-c1", "nonstream-c8", "nonstream-c32", "nonstream-c128",
		"stream-c1", "stream-c8", "stream-c64", "stream-c256", "stream-paced-c64",
		"history-64k-c32", "embeddings-1536-c32",
		"fallback-500-c16", "open-300ms-r500", "open-300ms-r1000", "open-300ms-r2000",
		"cpu-r1000", "hold-1000", "hold-5000",
	} {
		t.Run(name, func(t *testing.T) {
			p, ok := byName[name]
			if !ok {
				t.Fatalf("missing")
			}
			if p.dur <= 0 || p.warmup < 0 {
				t.Errorf("window %s, warm-up %s", p.dur, p.warmup)
			}
			want := 3
			if p.group == groupHold || p.group == groupFallback {
				want = 2
			}
			if len(p.targets) != want {
				t.Errorf("targets %v, want %d", p.targets, want)
			}
			if p.group == groupOpen && p.warmup < time.Second {
				t.Errorf("open loop warm-up %s, want at least 1s", p.warmup)
			}
		})
	}
	t.Run("default plan fits in 18 minutes", func(t *testing.T) {
		if d := estimate(ps, 3, 5, true); d > 18*time.Minute {
			t.Errorf("estimate %s", d)
		}
	})
}
