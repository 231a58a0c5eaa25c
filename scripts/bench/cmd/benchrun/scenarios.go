package main

import (
	"fmt"
	"time"
)

// Scenario groups: each has its own table, and most a chart.
const (
	groupNonStream = "nonstream"
	groupStream    = "stream"
	groupPayload   = "payload"
	groupLarge     = "large"
	groupOpen      = "open"
	groupCPU       = "cpu"
	groupHold      = "hold"
	groupFallback  = "fallback"
)

// plan is one scenario to run: loadgen arguments and how to run them.
type plan struct {
	name, group, title string
	x                  float64
	args               []string // loadgen flags besides -url, -json and -pid
	warmup, dur        time.Duration
	// extra is the expected time a run takes beyond warm-up and window
	// (answers still in flight, stream set-up), for the time budget.
	extra time.Duration
	// targets defaults to allTargets.
	targets []string
	// fresh runs every repetition on a newly started target process.
	fresh bool
}

// timing are the windows chosen on the command line.
type timing struct {
	warmup, dur, holdDur, cpuDur time.Duration
}

// plans returns every load scenario of the brief, in run order.
func plans(t timing) []plan {
	var ps []plan
	chat := []string{"-prompt-words", "200"}
	for _, c := range []int{1, 8, 32, 128} {
		ps = append(ps, plan{
			name: fmt.Sprintf("nonstream-c%d", c), group: groupNonStream, x: float64(c),
			title: fmt.Sprintf("Non-stream, instant upstream, %d %s", c, plural(c, "client")),
			args:  append([]string{"-c", itoa(c)}, chat...),
		})
	}
	for _, c := range []int{1, 8, 64, 256} {
		ps = append(ps, plan{
			name: fmt.Sprintf("stream-c%d", c), group: groupStream, x: float64(c),
			title: fmt.Sprintf("Stream of 50 chunks, instant upstream, %d %s", c, plural(c, "client")),
			args:  append([]string{"-c", itoa(c), "-stream", "-chunks", "50"}, chat...),
		})
	}
	ps = append(ps,
		plan{
			name: "stream-paced-c64", group: groupStream, x: 64,
			title: "Stream of 50 chunks paced 5 ms apart, 64 clients",
			args:  append([]string{"-c", "64", "-stream", "-chunks", "50", "-chunk-delay", "5ms"}, chat...),
			extra: 250 * time.Millisecond,
		},
		plan{
			name: "history-64k-c32", group: groupPayload, x: 32,
			title: "Non-stream with 64 KB conversation history, 32 clients",
			args:  []string{"-c", "32", "-history-kb", "64"},
		},
		plan{
			name: "embeddings-1536-c32", group: groupPayload, x: 32,
			title: "Embeddings of 1,536 dimensions, 32 clients",
			args:  []string{"-c", "32", "-embeddings", "-dims", "1536"},
		},
	)
	for _, kb := range []int{64, 512} {
		// Agent and RAG sized prompts (issue #18): the body is about kb KiB
		// of mixed text, so per-byte costs dominate.
		ps = append(ps, plan{
			name: fmt.Sprintf("large-%dk-c8", kb), group: groupLarge, x: float64(kb),
			title: fmt.Sprintf("Non-stream, %d KB chat body of mixed text, 8 clients", kb),
			args:  []string{"-c", "8", "-history-kb", itoa(kb), "-history-mixed", "-prompt-words", "16"},
		})
	}
	ps = append(ps, plan{
		name: "fallback-500-c16", group: groupFallback, x: 16,
		title:   "Fallback after upstream 500, 16 clients (next to the same load without failures)",
		args:    append([]string{"-c", "16"}, chat...),
		targets: []string{targetTollgate, targetFallback},
	})
	for _, rate := range []int{500, 1000, 2000} {
		ps = append(ps, plan{
			name: fmt.Sprintf("open-300ms-r%d", rate), group: groupOpen, x: float64(rate),
			title:  fmt.Sprintf("Open loop, 300 ms upstream, %d req/s", rate),
			args:   append([]string{"-rate", itoa(rate), "-latency-ms", "300", "-max-inflight", "4000"}, chat...),
			warmup: max(t.warmup, time.Second), // the connection pools fill during warm-up
			extra:  400 * time.Millisecond,
		})
	}
	ps = append(ps, plan{
		name: "cpu-r1000", group: groupCPU, x: 1000,
		title: "CPU per 1,000 requests: non-stream at a fixed 1,000 req/s",
		args:  append([]string{"-rate", "1000", "-max-inflight", "1000"}, chat...),
		dur:   t.cpuDur,
	}, plan{
		// The light load: requests 10 ms apart, so each wakes an
		// idle process. The window is twice the 1,000 req/s one, for
		// enough 10 ms CPU ticks from a tenth of the requests.
		name: "cpu-r100", group: groupCPU, x: 100,
		title: "CPU per 1,000 requests: non-stream at a fixed 100 req/s",
		args:  append([]string{"-rate", "100", "-max-inflight", "100"}, chat...),
		dur:   t.cpuDur * 2,
	})
	for _, n := range []int{1000, 5000} {
		// Slow streams: one chunk a second, far longer than the hold.
		// loadgen opens them all at once; beyond the listen backlog some
		// connections wait for a SYN retransmit, so larger holds get one
		// more second per 1,000 streams to establish.
		ps = append(ps, plan{
			name: fmt.Sprintf("hold-%d", n), group: groupHold, x: float64(n),
			title:   fmt.Sprintf("RSS with %d concurrent slow streams", n),
			args:    []string{"-hold", itoa(n), "-chunks", "600", "-chunk-delay", "1s", "-prompt-words", "16"},
			dur:     t.holdDur + time.Duration(n/1000-1)*time.Second,
			warmup:  -1, // hold mode has none
			extra:   1500 * time.Millisecond,
			targets: []string{targetBareproxy, targetTollgate},
			fresh:   true,
		})
	}
	for i := range ps {
		p := &ps[i]
		if p.dur == 0 {
			p.dur = t.dur
		}
		switch {
		case p.warmup < 0:
			p.warmup = 0
		case p.warmup == 0:
			p.warmup = t.warmup
		}
		if len(p.targets) == 0 {
			p.targets = allTargets()
		}
	}
	return ps
}

// runOverhead is the time a run costs beyond its window and warm-up:
// process start of loadgen, settling, writing the report.
const runOverhead = 300 * time.Millisecond

// estimate is the planned wall time of ps at reps repetitions, plus
// start-up measurements, builds and Go benchmarks.
func estimate(ps []plan, reps, startReps int, goBench bool) time.Duration {
	var d time.Duration
	for _, p := range ps {
		per := p.warmup + p.dur + p.extra + runOverhead
		if p.fresh {
			per += 500 * time.Millisecond
		}
		d += per * time.Duration(reps*len(p.targets))
		if profiled(p.name) {
			pp := profilePlan(p)
			d += pp.warmup + pp.dur + pp.extra + runOverhead
		}
		if _, ok := pausedScenarios[p.name]; ok {
			d += leaseWarmup + runOverhead + (p.warmup+p.dur+p.extra+runOverhead)*time.Duration(reps)
		}
	}
	d += time.Duration(startReps*3) * 1500 * time.Millisecond // start-up and idle RSS
	d += 30 * time.Second                                     // build and stack start
	if goBench {
		d += 60 * time.Second
	}
	return d
}

// plural returns word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
