//go:build linux

package usage

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// Load of BenchmarkPublishCPU's paced runs: events arrive one by one from
// many goroutines, as they do from a gateway serving many clients.
const (
	pacedProducers = 16
	pacedRate      = 16000 // events/s, in total
)

// BenchmarkPublishCPU measures the CPU that publishing costs per event
// (issue #12). Each run publishes b.N events and counts the process's CPU
// time from the first event handed over to the last ack. Run it with a
// fixed count and compare medians, as the figures are noisy on a shared
// machine:
//
//	go test -run '^$' -bench PublishCPU -benchtime 32000x -count 5 ./pkg/usage/
//
// Sub-benchmarks:
//   - server=emb publishes to an embedded server, whose CPU is counted in
//     cpu-ns/event; server=ext to a nats-server process (the binary on PATH,
//     else skipped), whose CPU is reported apart as srv-cpu-ns/event.
//   - load=paced: pacedProducers goroutines, pacedRate events/s in total,
//     staggered so that the publisher sees the events one at a time;
//     load=burst: one goroutine handing over events as fast as it can.
//   - mode=run goes through Enqueue and Run with the default FlushDelay,
//     run-noflush with FlushDelay off, run-flush* with other values;
//     mode=direct makes the same publishes (marshal, subject, Nats-Msg-Id)
//     with PublishMsgAsync from the producing goroutines, without a
//     publisher: what the client library costs for publishes made one by
//     one; mode=idle does the pacing alone and publishes nothing.
//
// Metrics: cpu-ns/event (user and system CPU of this process),
// srv-cpu-ns/event, writes/event (write syscalls of this process, from
// /proc/self/io: mostly the NATS client's socket writes, plus the embedded
// server's), events/s (wall clock), allocs/op (per event; the embedded
// server's included). Expected with server=ext: at most 1 alloc per event
// for mode=run and 0 under load=burst, since one publish carries a whole
// batch (issue #13) and its allocations (the reply subject, the ack
// message the client delivers; the batch's event list and Nats-Msg-Id)
// are shared by the batch's events; about 6 for mode=run-noflush (a batch
// per event; 19-21 when the publisher used the JetStream client's
// asynchronous publish, with its pending-ack future, timer, channels and
// ack JSON); 30 for mode=direct, which publishes one event per message with
// that client API, as the publisher did before batches (24 then).
func BenchmarkPublishCPU(b *testing.B) {
	modes := []struct {
		name string
		cfg  Config
	}{
		{name: "run"}, // the default FlushDelay
		{name: "run-noflush", cfg: Config{FlushDelay: -1}},
		{name: "run-flush100us", cfg: Config{FlushDelay: 100 * time.Microsecond}},
		{name: "run-flush500us", cfg: Config{FlushDelay: 500 * time.Microsecond}},
		{name: "run-flush1ms", cfg: Config{FlushDelay: time.Millisecond}},
		{name: "direct"},
		{name: "idle"},
	}
	for _, server := range []string{"emb", "ext"} {
		for _, load := range []string{"paced", "burst"} {
			for _, m := range modes {
				if m.name == "idle" && load != "paced" {
					continue
				}
				b.Run("server="+server+"/load="+load+"/mode="+m.name, func(b *testing.B) {
					benchPublishCPU(b, server, load, m.name, m.cfg)
				})
			}
		}
	}
}

func benchPublishCPU(b *testing.B, server, load, mode string, cfg Config) {
	var url string
	var srvCPU func() time.Duration
	if server == "emb" {
		url = startServer(b).url()
	} else {
		ext := startExtServer(b)
		url, srvCPU = ext.url, ext.cpu
	}
	_, js := connectURL(b, url, cfg)
	producers, rate := pacedProducers, float64(pacedRate)
	if load == "burst" {
		producers, rate = 1, 0
	}
	evs := make([]*usagev1.UsageEvent, b.N)
	for i := range evs {
		evs[i] = newEvent(b, "finance", i)
	}

	var emit func(i int)
	var wait func()
	var p *Publisher
	switch {
	case strings.HasPrefix(mode, "run"):
		cfg.SpoolDir = b.TempDir()
		cfg.Buffer = max(cfg.Buffer, b.N)
		var err error
		if p, err = NewPublisher(js, cfg, nil); err != nil {
			b.Fatal(err)
		}
		runErr := make(chan error, 1)
		go func() { runErr <- p.Run(context.Background()) }()
		defer func() {
			if err := p.Close(context.Background()); err != nil {
				b.Error(err)
			}
			if err := <-runErr; err != nil {
				b.Error(err)
			}
		}()
		emit = func(i int) {
			if err := p.Enqueue(evs[i]); err != nil {
				b.Error(err)
			}
		}
		wait = func() {
			// A coarse poll: its own wake-ups cost next to nothing.
			for p.Stats().Published < int64(b.N) {
				time.Sleep(2 * time.Millisecond)
			}
		}
	case mode == "direct":
		emit = func(i int) { publishDirect(b, js, evs[i]) }
		wait = func() {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				b.Fatalf("acks outstanding: %d", js.PublishAsyncPending())
			}
		}
	default:
		emit, wait = func(int) {}, func() {}
	}

	b.ReportAllocs()
	b.ResetTimer()
	cpu0, w0 := processCPU(b), processWrites(b)
	var srv0 time.Duration
	if srvCPU != nil {
		srv0 = srvCPU()
	}
	start := time.Now()
	produce(b.N, producers, rate, emit)
	wait()
	wall := time.Since(start)
	cpu, writes := processCPU(b)-cpu0, processWrites(b)-w0
	var srv time.Duration
	if srvCPU != nil {
		srv = srvCPU() - srv0
	}
	b.StopTimer()

	n := float64(b.N)
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/event")
	if srvCPU != nil {
		b.ReportMetric(float64(srv.Nanoseconds())/n, "srv-cpu-ns/event")
	}
	b.ReportMetric(float64(writes)/n, "writes/event")
	b.ReportMetric(n/wall.Seconds(), "events/s")
	if p != nil {
		if st := p.Stats(); st.Published != int64(b.N) || st.Spooled != 0 || st.Failed != 0 || st.Dropped != 0 {
			b.Fatalf("not a clean run: %+v", st)
		}
	}
}

// produce hands over n events from the given number of goroutines: event i
// at i/rate seconds after the start, or all at once when rate is 0.
func produce(n, producers int, rate float64, emit func(i int)) {
	var gap time.Duration
	if rate > 0 {
		gap = time.Duration(float64(time.Second) / rate)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for g := range producers {
		wg.Go(func() {
			for i := g; i < n; i += producers {
				if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
					time.Sleep(d)
				}
				emit(i)
			}
		})
	}
	wg.Wait()
}

// publishDirect makes the publish Run makes for ev, with the same options.
func publishDirect(b *testing.B, js jetstream.JetStream, ev *usagev1.UsageEvent) {
	data, err := proto.Marshal(ev)
	if err != nil {
		b.Error(err)
		return
	}
	msg := &nats.Msg{Subject: Subject(ev.GetDept()), Data: data}
	_, err = js.PublishMsgAsync(msg, jetstream.WithMsgID(ev.GetEventId()),
		jetstream.WithRetryAttempts(0), jetstream.WithStallWait(5*time.Second))
	if err != nil {
		b.Error(err)
	}
}

// processCPU returns the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processWrites returns the number of write syscalls this process has made.
func processWrites(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("syscw:")); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no syscw in /proc/self/io")
	return 0
}

// extServer is a nats-server process with JetStream, for measuring the
// publisher's CPU without the server's.
type extServer struct {
	b   *testing.B
	cmd *exec.Cmd
	url string
}

func startExtServer(b *testing.B) *extServer {
	b.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatalf("nats-server not on PATH: %v", err)
		}
		b.Skipf("nats-server not on PATH (CI=true makes this fail): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", b.TempDir())
	// Cleanup does not run when the benchmark panics: let the server die
	// with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	s := &extServer{b: b, cmd: cmd, url: "nats://127.0.0.1:" + strconv.Itoa(port)}
	deadline := time.Now().Add(5 * time.Second)
	for {
		nc, err := nats.Connect(s.url)
		if err == nil {
			nc.Close()
			return s
		}
		if time.Now().After(deadline) {
			b.Fatalf("nats-server not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpu returns the user and system CPU time the server process has used,
// to the kernel's 10 ms accounting tick.
func (s *extServer) cpu() time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
	if err != nil {
		s.b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th, in clock ticks of 1/100 s.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		s.b.Fatalf("cannot parse %q", data)
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 13 {
		s.b.Fatalf("cannot parse %q", data)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			s.b.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
