package loadgen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Report holds every figure of one run. Latency percentiles cover
// successful requests only; errors are counted by kind.
type Report struct {
	Params Params `json:"params"`
	// Started is when the run began (warm-up included).
	Started time.Time `json:"started"`
	// ElapsedS runs from the start of the measured window to the completion
	// of the last measured request, in seconds.
	ElapsedS float64 `json:"elapsed_s"`
	// Requests counts measured requests with an outcome: Successes + Errors.
	Requests  int64 `json:"requests"`
	Successes int64 `json:"successes"`
	Errors    int64 `json:"errors"`
	// ErrorsByKind names each problem found, e.g. status_5xx, chunk_count, dropped.
	ErrorsByKind map[string]int64 `json:"errors_by_kind"`
	// StatusCodes counts the HTTP status of every response received.
	StatusCodes map[string]int64 `json:"status_codes"`
	// RPS is successful requests per second over ElapsedS.
	RPS float64 `json:"rps"`
	// Latency is measured from the send time (closed loop) or from the
	// intended send time (open loop) to the end of the body.
	Latency Latency `json:"latency"`
	// TTFC is the time to the first content chunk of streams, measured from
	// the same origin as Latency.
	TTFC *Latency   `json:"ttfc,omitempty"`
	Open *OpenStats `json:"open_loop,omitempty"`
	Hold *HoldStats `json:"hold,omitempty"`
	// Procs has one entry per sampled process, this one first.
	Procs []Proc `json:"procs"`
}

// Params are the run's parameters as reported; secrets are left out.
type Params struct {
	Mode        string   `json:"mode"`
	URL         string   `json:"url"`
	Auth        bool     `json:"auth"`
	HeaderNames []string `json:"header_names,omitempty"`
	Body        any      `json:"body,omitempty"`
	BodyBytes   int      `json:"body_bytes"`
	Stream      bool     `json:"stream"`
	Chunks      int      `json:"chunks,omitempty"`
	Embeddings  bool     `json:"embeddings,omitempty"`
	Dims        int      `json:"dims,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Rate        float64  `json:"rate,omitempty"`
	MaxInflight int      `json:"max_inflight,omitempty"`
	Hold        int      `json:"hold,omitempty"`
	DurationS   float64  `json:"duration_s"`
	WarmupS     float64  `json:"warmup_s"`
	Requests    int64    `json:"requests_limit,omitempty"`
	TimeoutS    float64  `json:"timeout_s"`
	PIDs        []int    `json:"pids,omitempty"`
}

// Latency summarises durations, in milliseconds.
type Latency struct {
	Count  int     `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	MinMS  float64 `json:"min_ms"`
	P50MS  float64 `json:"p50_ms"`
	P90MS  float64 `json:"p90_ms"`
	P99MS  float64 `json:"p99_ms"`
	P999MS float64 `json:"p99_9_ms"`
	MaxMS  float64 `json:"max_ms"`
}

// OpenStats describes the open-loop schedule.
type OpenStats struct {
	// TargetRate is the requested rate per second.
	TargetRate float64 `json:"target_rate"`
	// Scheduled counts requests due in the measured window, dropped ones included.
	Scheduled int64 `json:"scheduled"`
	// PeakInflight is the most requests in flight at once.
	PeakInflight int64 `json:"peak_inflight"`
}

// HoldStats describes a hold run.
type HoldStats struct {
	// Requested is the number of streams asked for.
	Requested int64 `json:"requested"`
	// Established streams got a 200 event-stream answer header.
	Established int64 `json:"established"`
	// OpenAtEnd streams were still open, and fine so far, when the hold ended.
	OpenAtEnd int64 `json:"open_at_end"`
	// Completed streams ended, valid, before the hold ended.
	Completed int64 `json:"completed"`
}

// Proc is one sampled process over the measured window.
type Proc struct {
	PID  int  `json:"pid"`
	Self bool `json:"self"`
	// CPUSeconds is user+system CPU time consumed in the window.
	CPUSeconds float64 `json:"cpu_s"`
	// Cores is CPUSeconds divided by the window length.
	Cores float64 `json:"cores"`
	// CPUPer1kRequests is CPUSeconds per 1,000 measured requests.
	CPUPer1kRequests float64 `json:"cpu_s_per_1k_requests"`
	RSSStartMB       float64 `json:"rss_start_mb"`
	RSSEndMB         float64 `json:"rss_end_mb"`
	// PeakRSSMB is the largest RSS sampled in the window.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// HWMMB is the kernel's peak RSS since the process started (VmHWM),
	// read at the end; the kernel updates it lazily, so it can trail PeakRSSMB.
	HWMMB float64 `json:"hwm_mb"`
	// RSSPer1kStreamsMB is (end - start RSS) per 1,000 held streams (hold mode).
	RSSPer1kStreamsMB float64 `json:"rss_per_1k_streams_mb,omitempty"`
	Samples           int     `json:"samples"`
	Err               string  `json:"error,omitempty"`
}

// summarize sorts ns (durations in nanoseconds) in place and returns its
// nearest-rank percentiles.
func summarize(ns []int64) Latency {
	if len(ns) == 0 {
		return Latency{}
	}
	slices.Sort(ns)
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	at := func(p float64) float64 {
		i := int(float64(len(ns))*p+0.999999999) - 1 // ceil(p*n) - 1
		i = min(max(i, 0), len(ns)-1)
		return ms(ns[i])
	}
	return Latency{
		Count:  len(ns),
		MeanMS: sum / float64(len(ns)) / 1e6,
		MinMS:  ms(ns[0]),
		P50MS:  at(0.50),
		P90MS:  at(0.90),
		P99MS:  at(0.99),
		P999MS: at(0.999),
		MaxMS:  ms(ns[len(ns)-1]),
	}
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// WriteTable writes r as a human-readable table.
func (r *Report) WriteTable(w io.Writer) error {
	p := &tableWriter{w: w}
	label := map[string]string{"closed": "closed loop", "open": "open loop", "hold": "hold"}[r.Params.Mode]
	p.printf("%s  %s  body %d B  stream=%v", label, r.Params.URL, r.Params.BodyBytes, r.Params.Stream)
	if r.Params.Stream {
		p.printf(" chunks=%d", r.Params.Chunks)
	}
	p.printf("\n")
	limit := fmt.Sprintf("duration %.1fs", r.Params.DurationS)
	if r.Params.Requests > 0 {
		limit = fmt.Sprintf("n %d (time cap %.0fs)", r.Params.Requests, r.Params.DurationS)
	}
	switch r.Params.Mode {
	case "closed":
		p.printf("concurrency %d  %s  warmup %.1fs\n", r.Params.Concurrency, limit, r.Params.WarmupS)
	case "open":
		p.printf("rate %g/s  max in-flight %d  %s  warmup %.1fs\n", r.Params.Rate, r.Params.MaxInflight, limit, r.Params.WarmupS)
	case "hold":
		p.printf("hold %d streams for %.1fs\n", r.Params.Hold, r.Params.DurationS)
	}
	if r.Hold == nil {
		p.printf("requests %d  ok %d  errors %d  elapsed %.3fs  rps %.1f\n", r.Requests, r.Successes, r.Errors, r.ElapsedS, r.RPS)
	}
	if r.Errors > 0 {
		p.printf("ERRORS:")
		for _, k := range slices.Sorted(maps.Keys(r.ErrorsByKind)) {
			p.printf(" %s=%d", k, r.ErrorsByKind[k])
		}
		p.printf("\n")
	}
	if len(r.StatusCodes) > 0 {
		p.printf("status:")
		for _, k := range slices.Sorted(maps.Keys(r.StatusCodes)) {
			p.printf(" %s=%d", k, r.StatusCodes[k])
		}
		p.printf("\n")
	}
	if r.Open != nil {
		p.printf("scheduled %d  peak in-flight %d\n", r.Open.Scheduled, r.Open.PeakInflight)
	}
	if r.Hold != nil {
		p.printf("streams requested %d  established %d  open at end %d  completed early %d  errors %d\n",
			r.Hold.Requested, r.Hold.Established, r.Hold.OpenAtEnd, r.Hold.Completed, r.Errors)
	}
	if r.Hold == nil {
		p.printf("%-10s %9s %9s %9s %9s %9s %9s %9s\n", "ms", "mean", "min", "p50", "p90", "p99", "p99.9", "max")
		row := func(name string, l Latency) {
			p.printf("%-10s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, l.MeanMS, l.MinMS, l.P50MS, l.P90MS, l.P99MS, l.P999MS, l.MaxMS)
		}
		row("latency", r.Latency)
		if r.TTFC != nil {
			row("ttfc", *r.TTFC)
		}
	}
	if len(r.Procs) > 0 {
		p.printf("%-14s %8s %7s %12s %9s %9s %9s %9s", "process", "cpu_s", "cores", "cpu_s/1k_req", "rss0_mb", "rss1_mb", "peak_mb", "hwm_mb")
		if r.Hold != nil {
			p.printf(" %14s", "mb/1k_streams")
		}
		p.printf("\n")
		for _, pr := range r.Procs {
			name := strconv.Itoa(pr.PID)
			if pr.Self {
				name += " (loadgen)"
			}
			if pr.Err != "" {
				p.printf("%-14s error: %s\n", name, pr.Err)
				continue
			}
			p.printf("%-14s %8.2f %7.2f %12.4f %9.1f %9.1f %9.1f %9.1f", name, pr.CPUSeconds, pr.Cores, pr.CPUPer1kRequests,
				pr.RSSStartMB, pr.RSSEndMB, pr.PeakRSSMB, pr.HWMMB)
			if r.Hold != nil {
				p.printf(" %14.2f", pr.RSSPer1kStreamsMB)
			}
			p.printf("\n")
		}
	}
	return p.err
}

// tableWriter keeps the first write error.
type tableWriter struct {
	w   io.Writer
	err error
}

func (t *tableWriter) printf(format string, a ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, a...)
	}
}
