package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/pkg/loadgen"
)

// stopGrace is how long a process has to exit after SIGTERM before it is
// killed.
const stopGrace = 5 * time.Second

// proc is one child process started by the suite.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // exit error; read after done is closed
}

// pid returns the process id. With CPU pinning the process is started
// through taskset, which execs the program in place: the id stays the same.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then kills the process.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s (pid %d): %w", p.name, p.pid(), err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", p.name, p.pid(), err)
	}
	<-p.done
	return fmt.Errorf("%s (pid %d) did not stop within %s and was killed", p.name, p.pid(), grace)
}

// logTail returns the last bytes of the process's log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// procs owns every process the suite starts and stops them all, by id, on
// the way out (also after an error or an interrupt).
type procs struct {
	logDir string
	pin    bool // start processes through taskset

	mu   sync.Mutex // guards list
	list []*proc
}

// start runs bin with args, pinned to cpu when pinning is on, with its
// output in logDir/name.log.
func (ps *procs) start(name, cpu string, env []string, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(ps.logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer f.Close() // the child has its own copy
	cmd := pinned(ps.pin, cpu, bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// stop stops p and forgets it.
func (ps *procs) stop(p *proc) error {
	err := p.stop(stopGrace)
	ps.mu.Lock()
	ps.list = slices.DeleteFunc(ps.list, func(q *proc) bool { return q == p })
	ps.mu.Unlock()
	return err
}

// stopAll stops every process still running, the last started first.
func (ps *procs) stopAll() error {
	ps.mu.Lock()
	list := slices.Clone(ps.list)
	ps.list = nil
	ps.mu.Unlock()
	var errs []error
	for i := len(list) - 1; i >= 0; i-- {
		errs = append(errs, list[i].stop(stopGrace))
	}
	return errors.Join(errs...)
}

// pinned returns the command running bin on cpu (through taskset) when pin
// is set, or bin itself.
func pinned(pin bool, cpu, bin string, args ...string) *exec.Cmd {
	if !pin || cpu == "" {
		return exec.Command(bin, args...)
	}
	return exec.Command("taskset", append([]string{"-c", cpu, bin}, args...)...)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port //nolint:forcetypeassert // tcp listener
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// probe is one readiness request: the process is ready when it answers 200.
type probe struct {
	url   string
	body  []byte // POST when set, else GET
	token string
}

// waitReady polls pr every interval until it answers 200, p exits, or
// timeout passes. It returns the time from since to the first 200.
func waitReady(ctx context.Context, p *proc, pr probe, since time.Time, timeout, interval time.Duration) (time.Duration, error) {
	// A fresh connection per attempt: a refused dial must not be reused.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p != nil && p.exited() {
			return 0, fmt.Errorf("%s exited before it was ready: %v\n%s", p.name, p.err, p.logTail())
		}
		status, err := get(ctx, client, pr)
		if err == nil && status == http.StatusOK {
			return time.Since(since), nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("status %d", status)
		}
		if time.Now().After(deadline) {
			name := "process"
			if p != nil {
				name = p.name
			}
			return 0, fmt.Errorf("%s not ready within %s (%s: %v)", name, timeout, pr.url, last)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(interval):
		}
	}
}

func get(ctx context.Context, client *http.Client, pr probe) (int, error) {
	method := http.MethodGet
	var body io.Reader
	if pr.body != nil {
		method, body = http.MethodPost, bytes.NewReader(pr.body)
	}
	req, err := http.NewRequestWithContext(ctx, method, pr.url, body)
	if err != nil {
		return 0, fmt.Errorf("build probe: %w", err)
	}
	if pr.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if pr.token != "" {
		req.Header.Set("Authorization", "Bearer "+pr.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// settle waits until the given processes have been nearly idle (at most
// one scheduler tick of CPU time per 200 ms) or max has passed, so work
// left over from one run (usage events still being folded, connections
// closing) does not steal CPU from the next. It returns how long it waited.
func settle(ctx context.Context, pids []int, max time.Duration) time.Duration {
	start := time.Now()
	cpu := func() time.Duration {
		var total time.Duration
		for _, pid := range pids {
			if st, err := loadgen.ReadProc(pid); err == nil {
				total += st.CPU
			}
		}
		return total
	}
	prev := cpu()
	for time.Since(start) < max {
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(200 * time.Millisecond):
		}
		now := cpu()
		if now-prev <= 10*time.Millisecond {
			break
		}
		prev = now
	}
	return time.Since(start)
}

// rssMB reads the resident set size of pid in MiB.
func rssMB(pid int) (float64, error) {
	st, err := loadgen.ReadProc(pid)
	if err != nil {
		return 0, err
	}
	return float64(st.RSS) / (1 << 20), nil
}

// anonMB reads the anonymous part of pid's resident set in MiB (RssAnon):
// heap, stacks and runtime memory, without the program's file-backed
// pages (code and read-only data, shared with the page cache).
func anonMB(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read proc status: %w", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("RssAnon:")); ok {
			v = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))
			kb, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse RssAnon %q: %w", v, err)
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, fmt.Errorf("no RssAnon in /proc/%d/status", pid)
}

// itoa is strconv.Itoa, short for argument lists.
func itoa(n int) string { return strconv.Itoa(n) }
