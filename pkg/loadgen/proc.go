package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go supports (getconf CLK_TCK).
const clockTicks = 100

// ProcStat is one reading of a process's CPU time and memory from /proc.
type ProcStat struct {
	// CPU is user plus system time consumed since the process started, at
	// 10 ms resolution.
	CPU time.Duration
	// RSS is the resident set size in bytes (VmRSS).
	RSS int64
	// HWM is the peak resident set size in bytes since start (VmHWM).
	HWM int64
}

// ReadProc reads /proc/PID/stat and /proc/PID/status. Linux only.
func ReadProc(pid int) (ProcStat, error) {
	var st ProcStat
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, fmt.Errorf("read proc stat: %w", err)
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. utime and stime are fields 14 and 15, the 12th and 13th
	// after the name.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return st, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 13 {
		return st, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return st, fmt.Errorf("parse /proc/%d/stat: bad utime or stime", pid)
	}
	st.CPU = time.Duration(utime+stime) * time.Second / clockTicks

	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return st, fmt.Errorf("read proc status: %w", err)
	}
	for line := range bytes.Lines(status) {
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			st.RSS, err = parseKB(line[len("VmRSS:"):])
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			st.HWM, err = parseKB(line[len("VmHWM:"):])
		}
		if err != nil {
			return st, fmt.Errorf("parse /proc/%d/status: %w", pid, err)
		}
	}
	return st, nil
}

// parseKB parses "   1234 kB" into bytes.
func parseKB(v []byte) (int64, error) {
	v = bytes.TrimSpace(v)
	v = bytes.TrimSpace(bytes.TrimSuffix(v, []byte("kB")))
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse size %q: %w", v, err)
	}
	return n << 10, nil
}

// procWatch follows one process over a measured window.
type procWatch struct {
	pid        int
	self       bool
	start, end ProcStat
	peakRSS    int64
	samples    int
	err        error
}

// sampler reads /proc for a set of processes at the start and end of the
// measured window and every interval in between, for the peak RSS.
type sampler struct {
	every time.Duration

	mu       sync.Mutex // guards watches, started and finished
	watches  []*procWatch
	started  bool
	finished bool
}

func newSampler(pids []int, every time.Duration) *sampler {
	s := &sampler{every: every}
	s.watches = append(s.watches, &procWatch{pid: os.Getpid(), self: true})
	for _, pid := range pids {
		if pid != os.Getpid() {
			s.watches = append(s.watches, &procWatch{pid: pid})
		}
	}
	return s
}

// run samples until ctx is done.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample(false, false)
		}
	}
}

// mark takes the window's start sample.
func (s *sampler) mark() { s.sample(true, false) }

// finish takes the window's end sample.
func (s *sampler) finish() { s.sample(false, true) }

func (s *sampler) sample(start, end bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	if start {
		s.started = true
	}
	if !s.started {
		if end {
			s.finished = true // the window never began: report nothing
		}
		return
	}
	for _, w := range s.watches {
		if w.err != nil {
			continue
		}
		st, err := ReadProc(w.pid)
		if err != nil {
			w.err = err
			continue
		}
		w.samples++
		w.peakRSS = max(w.peakRSS, st.RSS)
		if start {
			w.start = st
		}
		if end {
			w.end = st
		}
	}
	if end {
		s.finished = true
	}
}

// report turns the window's samples into per-process figures; requests is
// the number of measured requests, streams the number of streams held open.
func (s *sampler) report(window time.Duration, requests, streams int64) []Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Proc, 0, len(s.watches))
	for _, w := range s.watches {
		p := Proc{PID: w.pid, Self: w.self, Samples: w.samples}
		if w.err != nil {
			p.Err = w.err.Error()
			out = append(out, p)
			continue
		}
		cpu := (w.end.CPU - w.start.CPU).Seconds()
		p.CPUSeconds = cpu
		if window > 0 {
			p.Cores = cpu / window.Seconds()
		}
		if requests > 0 {
			p.CPUPer1kRequests = cpu / float64(requests) * 1000
		}
		p.RSSStartMB = mb(w.start.RSS)
		p.RSSEndMB = mb(w.end.RSS)
		p.PeakRSSMB = mb(w.peakRSS)
		p.HWMMB = mb(w.end.HWM)
		if streams > 0 {
			p.RSSPer1kStreamsMB = mb(w.end.RSS-w.start.RSS) / float64(streams) * 1000
		}
		out = append(out, p)
	}
	return out
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
