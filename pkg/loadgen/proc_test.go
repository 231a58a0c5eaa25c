package loadgen

import (
	"context"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuTime is this process's user+system CPU time according to getrusage,
// a source independent of /proc/PID/stat, at microsecond resolution.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// spin burns d of CPU time (within 3 s of wall time on a busy machine) and
// returns the CPU time getrusage saw it use.
func spin(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	start := cpuTime(t)
	for wall := time.Now(); cpuTime(t)-start < d && time.Since(wall) < 3*time.Second; {
		for i := 0; i < 100_000; i++ {
			_ = i * i
		}
	}
	return cpuTime(t) - start
}

// near reports whether a /proc reading (10 ms ticks, sampled a little
// apart from getrusage) agrees with getrusage.
func near(proc, rusage time.Duration) bool {
	diff := proc - rusage
	return diff > -30*time.Millisecond && diff < 30*time.Millisecond
}

func TestReadProc(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"self", os.Getpid(), true},
		{"parent", os.Getppid(), true},
		{"no such process", 1 << 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ReadProc(tc.pid)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				return
			}
			if st.RSS < 1<<20 || st.RSS > 64<<30 || st.HWM < st.RSS || st.CPU < 0 {
				t.Fatalf("implausible %+v", st)
			}
		})
	}
}

func TestReadProcCPU(t *testing.T) {
	before, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	used := spin(t, 200*time.Millisecond)
	after, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := after.CPU - before.CPU; !near(d, used) || d <= 0 {
		t.Fatalf("/proc says %v of CPU, getrusage %v", d, used)
	}
}

func TestSampler(t *testing.T) {
	s := newSampler([]int{os.Getppid()}, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.run(ctx) })
	s.mark()
	used := spin(t, 200*time.Millisecond)
	s.finish()
	cancel()
	wg.Wait()
	procs := s.report(100*time.Millisecond, 1000, 0)
	if len(procs) != 2 || !procs[0].Self || procs[1].PID != os.Getppid() {
		t.Fatalf("procs %+v", procs)
	}
	self := procs[0]
	cpu := time.Duration(self.CPUSeconds * float64(time.Second))
	if self.Err != "" || self.Samples < 3 || !near(cpu, used) || self.CPUPer1kRequests != self.CPUSeconds ||
		self.PeakRSSMB < self.RSSStartMB || self.HWMMB <= 0 || self.Cores <= 0 {
		t.Fatalf("self %+v", self)
	}
	s.mark() // after the window: ignored
	if again := s.report(100*time.Millisecond, 1000, 0); again[0] != self {
		t.Fatalf("a mark after the window changed the report: %+v", again[0])
	}
}
