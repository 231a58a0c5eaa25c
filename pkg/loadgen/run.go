// Package loadgen is the load generator of the benchmark suite: it sends
// OpenAI-style requests to a gateway (or straight to the mock upstream) in
// closed loop, open loop or hold mode, validates every answer, records
// latency and time to first chunk, samples the CPU time and memory of the
// processes under test, and reports it all.
//
// It is an instrument: every response that is not exactly right counts as
// an error of a named kind, open-loop latency is measured from the intended
// send time so queueing cannot hide (coordinated omission), every run is
// bounded in time and count, and only loopback targets are allowed unless
// told otherwise.
package loadgen

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Worker read buffers: streams are read in pieces of this size.
const (
	bufSize     = 16 << 10
	holdBufSize = 4 << 10
)

// errHoldEnded closes the streams still open when a hold ends.
var errHoldEnded = errors.New("hold ended")

// outcome is what a mode hands to the report.
type outcome struct {
	started     time.Time
	windowStart time.Time
	windowEnd   time.Time // hold only: when the end sample was taken
	recs        []*recorder
	open        *OpenStats
	hold        *HoldStats
}

// Run executes the load run cfg describes and returns its report. It
// returns an error only for an invalid configuration: problems with
// responses are counted in the report. Cancelling ctx ends the run early:
// no new request is sent and requests in flight finish within Timeout.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate(ctx)
	if err != nil {
		return nil, err
	}
	conns := cfg.Concurrency
	switch cfg.mode() {
	case "open":
		conns = cfg.MaxInflight
	case "hold":
		conns = cfg.Hold
	}
	t := newTarget(u, &cfg, conns)
	defer t.client.CloseIdleConnections()

	s := newSampler(cfg.PIDs, cfg.SampleEvery)
	sctx, stopSampler := context.WithCancel(context.Background())
	var sg sync.WaitGroup
	sg.Go(func() { s.run(sctx) })
	defer func() { stopSampler(); sg.Wait() }()

	var out outcome
	switch cfg.mode() {
	case "hold":
		out = holdStreams(ctx, t, s)
	case "open":
		out = openLoop(ctx, t, s)
	default:
		out = closedLoop(ctx, t, s)
	}
	return buildReport(&cfg, &out, s), nil
}

// markAt takes the sampler's window-start sample at time at; the returned
// func cancels it if it has not fired.
func markAt(s *sampler, at time.Time) func() {
	d := time.Until(at)
	if d <= 0 {
		s.mark()
		return func() {}
	}
	tm := time.AfterFunc(d, s.mark)
	return func() { tm.Stop() }
}

// closedLoop runs Concurrency workers, each sending its next request when
// the previous answer is complete. A request is measured when it is sent
// inside the window; those still in flight when the window ends are
// awaited, so slow answers are never left out.
func closedLoop(ctx context.Context, t *target, s *sampler) outcome {
	cfg := t.cfg
	started := time.Now()
	ws := started.Add(cfg.Warmup)
	we := ws.Add(cfg.Duration)
	cancelMark := markAt(s, ws)
	done := ctx.Done()
	var issued atomic.Int64
	var wg sync.WaitGroup
	recs := make([]*recorder, cfg.Concurrency)
	for i := range recs {
		w := newWorker(t, bufSize)
		recs[i] = &w.rec
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				if !start.Before(we) {
					return
				}
				measured := !start.Before(ws)
				if measured && cfg.Requests > 0 && issued.Add(1) > cfg.Requests {
					return
				}
				w.one(start, measured)
			}
		})
	}
	wg.Wait()
	cancelMark()
	s.finish()
	return outcome{started: started, windowStart: ws, recs: recs}
}

// openLoop sends requests at fixed intervals whatever the answers do, each
// on its own goroutine with its own worker state, at most MaxInflight at a
// time. Latency runs from the intended send time, so a late scheduler or a
// full in-flight cap shows in the figures instead of hiding.
func openLoop(ctx context.Context, t *target, s *sampler) outcome {
	cfg := t.cfg
	started := time.Now()
	ws := started.Add(cfg.Warmup)
	we := ws.Add(cfg.Duration)
	cancelMark := markAt(s, ws)
	done := ctx.Done()

	sched := &recorder{} // dropped requests
	free := make(chan *worker, cfg.MaxInflight)
	var (
		workers  []*worker
		inflight atomic.Int64
		stats    = &OpenStats{TargetRate: cfg.Rate}
		wg       sync.WaitGroup
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
loop:
	for i := int64(0); ; i++ {
		due := started.Add(time.Duration(float64(i) * float64(time.Second) / cfg.Rate))
		if !due.Before(we) {
			break
		}
		measured := !due.Before(ws)
		if measured && cfg.Requests > 0 && stats.Scheduled >= cfg.Requests {
			break
		}
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-done:
				break loop
			case <-timer.C:
			}
		} else {
			select {
			case <-done:
				break loop
			default:
			}
		}
		if measured {
			stats.Scheduled++
		}
		var w *worker
		select {
		case w = <-free:
		default:
			if len(workers) == cfg.MaxInflight {
				if measured {
					sched.add(kindDropped, 0, 0, 0, due)
				}
				continue
			}
			w = newWorker(t, bufSize)
			workers = append(workers, w)
		}
		stats.PeakInflight = max(stats.PeakInflight, inflight.Add(1))
		wg.Go(func() {
			w.one(due, measured)
			inflight.Add(-1)
			free <- w // never blocks: capacity is MaxInflight
		})
	}
	wg.Wait()
	cancelMark()
	s.finish()
	recs := []*recorder{sched}
	for _, w := range workers {
		recs = append(recs, &w.rec)
	}
	return outcome{started: started, windowStart: ws, recs: recs, open: stats}
}

// holdStreams opens Hold streams at once and keeps them open, reading as
// the answers trickle in, until Duration has passed; the end sample is
// taken while they are still open, then they are closed.
func holdStreams(ctx context.Context, t *target, s *sampler) outcome {
	cfg := t.cfg
	started := time.Now()
	end := started.Add(cfg.Duration)
	s.mark()
	hctx, stopHold := context.WithCancel(ctx)
	defer stopHold()
	stats := &HoldStats{Requested: int64(cfg.Hold)}
	var established atomic.Int64
	var wg sync.WaitGroup
	recs := make([]*recorder, cfg.Hold)
	for i := range recs {
		w := newWorker(t, holdBufSize)
		recs[i] = &w.rec
		wg.Go(func() {
			// The margin past the end lets the closing below, not the
			// timeout, end the streams.
			k, status := w.hold(hctx, started, cfg.Duration+time.Second, &established)
			w.rec.add(k, status, 0, 0, time.Now())
		})
	}
	tm := time.NewTimer(time.Until(end))
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
	tm.Stop()
	s.finish()
	windowEnd := time.Now()
	stopHold()
	wg.Wait()
	stats.Established = established.Load()
	for _, r := range recs {
		stats.OpenAtEnd += r.kinds[kindHeld]
		stats.Completed += r.kinds[kindOK]
	}
	return outcome{started: started, windowStart: started, windowEnd: windowEnd, recs: recs, hold: stats}
}

// hold runs one held stream; closing hctx ends it as held.
func (w *worker) hold(hctx context.Context, start time.Time, timeout time.Duration, established *atomic.Int64) (kind, int) {
	w.req.SetTimeout(timeout)
	if err := w.t.client.Do(&w.req, &w.resp); err != nil {
		return transportKind(err), 0
	}
	status := w.resp.StatusCode()
	if status != fasthttp.StatusOK {
		w.discard()
		return statusKind(status), status
	}
	established.Add(1)
	body, _ := w.resp.BodyStream().(fasthttp.ReadCloserWithError)
	stop := context.AfterFunc(hctx, func() {
		if body != nil {
			_ = body.CloseWithError(errHoldEnded) // interrupts a blocked read
		}
	})
	defer stop()
	k, _ := w.readStream(start)
	if k != kindOK && hctx.Err() != nil && (k == kindCut || k == kindTimeout) {
		return kindHeld, status
	}
	return k, status
}

// buildReport merges the workers' recorders into the report.
func buildReport(cfg *Config, out *outcome, s *sampler) *Report {
	r := &Report{
		Params:       params(cfg),
		Started:      out.started,
		ErrorsByKind: map[string]int64{},
		StatusCodes:  map[string]int64{},
		Open:         out.open,
		Hold:         out.hold,
	}
	var lat, ttfc []int64
	var last time.Time
	var kinds [numKinds]int64
	for _, rec := range out.recs {
		lat = append(lat, rec.lat...)
		ttfc = append(ttfc, rec.ttfc...)
		for k, n := range rec.kinds {
			kinds[k] += n
		}
		for code, n := range rec.status {
			r.StatusCodes[strconv.Itoa(code)] += n
		}
		if rec.last.After(last) {
			last = rec.last
		}
	}
	for k, n := range kinds {
		switch {
		case n == 0:
		case kind(k) == kindOK:
			r.Successes = n
		case kind(k) == kindHeld:
		default:
			r.ErrorsByKind[kind(k).String()] = n
			r.Errors += n
		}
	}
	r.Requests = r.Successes + r.Errors
	var elapsed time.Duration
	if out.hold != nil {
		elapsed = out.windowEnd.Sub(out.windowStart)
	} else if last.After(out.windowStart) {
		elapsed = last.Sub(out.windowStart)
	}
	r.ElapsedS = elapsed.Seconds()
	if elapsed > 0 && out.hold == nil {
		r.RPS = float64(r.Successes) / elapsed.Seconds()
	}
	r.Latency = summarize(lat)
	if cfg.Stream && out.hold == nil {
		l := summarize(ttfc)
		r.TTFC = &l
	}
	var streams, requests int64
	if out.hold != nil {
		streams = out.hold.OpenAtEnd
	} else {
		requests = r.Requests
	}
	r.Procs = s.report(elapsed, requests, streams)
	return r
}

func params(cfg *Config) Params {
	p := Params{
		Mode:       cfg.mode(),
		URL:        cfg.URL,
		Auth:       cfg.Token != "",
		Body:       cfg.BodyInfo,
		BodyBytes:  len(cfg.Body),
		Stream:     cfg.Stream,
		Chunks:     cfg.Chunks,
		Embeddings: cfg.Embeddings,
		Dims:       cfg.Dims,
		DurationS:  cfg.Duration.Seconds(),
		WarmupS:    cfg.Warmup.Seconds(),
		Requests:   cfg.Requests,
		TimeoutS:   cfg.Timeout.Seconds(),
		PIDs:       cfg.PIDs,
	}
	for _, h := range cfg.Headers {
		p.HeaderNames = append(p.HeaderNames, h[0])
	}
	slices.Sort(p.HeaderNames)
	switch p.Mode {
	case "closed":
		p.Concurrency = cfg.Concurrency
	case "open":
		p.Rate = cfg.Rate
		p.MaxInflight = cfg.MaxInflight
	case "hold":
		p.Hold = cfg.Hold
		p.WarmupS = 0
	}
	return p
}
