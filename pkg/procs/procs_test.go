package procs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// childEnv switches the test binary into one of the child modes below.
const childEnv = "PROCS_TEST_CHILD"

// TestMain runs the test binary as a child process when childEnv is set:
// every test starts real processes, and all of them are this binary.
func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child runs one child mode and returns its exit code. Modes that keep
// running print "ready" once their signal handling is in place.
func child(mode string) int {
	switch mode {
	case "sleep":
		fmt.Printf("ready pid=%d value=%s\n", os.Getpid(), os.Getenv("PROCS_TEST_VALUE"))
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
	case "exit":
		fmt.Println("bye")
		return 3
	case "chatty":
		for i := range 1000 {
			fmt.Printf("line %04d\n", i)
		}
		return 0
	case "affinity":
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("ready pid=%d %s\n", os.Getpid(), cpusAllowed(b))
	case "parent":
		g := &Group{LogDir: os.Getenv("PROCS_TEST_DIR")}
		p, err := g.Start("grandchild", StartOptions{Env: []string{childEnv + "=sleep"}}, os.Args[0])
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("grandchild %d\n", p.PID())
	default:
		fmt.Printf("unknown child mode %q\n", mode)
		return 2
	}
	time.Sleep(30 * time.Second)
	return 0
}

// cpusAllowed returns the Cpus_allowed_list line of a /proc status file.
func cpusAllowed(status []byte) string {
	for line := range strings.Lines(string(status)) {
		if strings.HasPrefix(line, "Cpus_allowed_list:") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	return ""
}

// startChild starts this test binary in mode under g, which ends it when
// the test does.
func startChild(t *testing.T, g *Group, name, mode string, env ...string) *Proc {
	t.Helper()
	p, err := g.Start(name, StartOptions{Env: append([]string{childEnv + "=" + mode}, env...)}, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newGroup returns a Group logging to a temporary directory that stops
// everything it started when the test ends.
func newGroup(t *testing.T) *Group {
	t.Helper()
	g := &Group{LogDir: t.TempDir()}
	t.Cleanup(func() { _ = g.StopAll(time.Second) })
	return g
}

// waitLog waits until p's log contains want and returns the log.
func waitLog(t *testing.T, p *Proc, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := p.LogTail()
		if strings.Contains(got, want) {
			return got
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("%s: log %q, want it to contain %q (exited: %v)", p.Name(), got, want, p.Exited())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// signalled returns the signal that ended a process, or 0.
func signalled(err error) syscall.Signal {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0
	}
	return ws.Signal()
}

func TestStop(t *testing.T) {
	tests := []struct {
		name       string
		mode       string
		grace      time.Duration
		wantErr    string // "" for none
		wantSignal syscall.Signal
	}{
		{name: "exits on SIGTERM", mode: "sleep", grace: 5 * time.Second, wantSignal: syscall.SIGTERM},
		{name: "ignores SIGTERM and is killed", mode: "ignore-term", grace: 200 * time.Millisecond, wantErr: "did not stop within 200ms and was killed", wantSignal: syscall.SIGKILL},
		{name: "already exited", mode: "exit", grace: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t)
			p := startChild(t, g, "child", tt.mode)
			if tt.mode == "exit" {
				if !p.Wait(10 * time.Second) {
					t.Fatal("child did not exit by itself")
				}
			} else {
				waitLog(t, p, "ready")
			}
			err := p.Stop(tt.grace)
			if tt.wantErr == "" && err != nil {
				t.Errorf("Stop: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Stop: %v, want an error containing %q", err, tt.wantErr)
			}
			if !p.Exited() {
				t.Fatal("process still running after Stop")
			}
			if got := signalled(p.Err()); got != tt.wantSignal {
				t.Errorf("ended by signal %d (%v), want %d", got, p.Err(), tt.wantSignal)
			}
			if err := p.Stop(tt.grace); err != nil {
				t.Errorf("second Stop: %v", err)
			}
		})
	}
}

func TestSignalWaitKill(t *testing.T) {
	tests := []struct {
		name       string
		mode       string
		end        func(*Proc) error
		wantSignal syscall.Signal
	}{
		{name: "SIGTERM then wait", mode: "sleep", end: func(p *Proc) error { return p.Signal(syscall.SIGTERM) }, wantSignal: syscall.SIGTERM},
		{name: "kill a process that ignores SIGTERM", mode: "ignore-term", end: func(p *Proc) error {
			if err := p.Signal(syscall.SIGTERM); err != nil {
				return err
			}
			if p.Wait(200 * time.Millisecond) {
				return errors.New("exited on the SIGTERM it ignores")
			}
			return p.Kill()
		}, wantSignal: syscall.SIGKILL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t)
			p := startChild(t, g, "child", tt.mode)
			waitLog(t, p, "ready")
			if p.Wait(50*time.Millisecond) || p.Exited() || p.Err() != nil {
				t.Fatalf("running child: exited %v, err %v", p.Exited(), p.Err())
			}
			if err := tt.end(p); err != nil {
				t.Fatal(err)
			}
			if !p.Wait(10 * time.Second) {
				t.Fatal("child did not exit")
			}
			if got := signalled(p.Err()); got != tt.wantSignal {
				t.Errorf("ended by signal %d (%v), want %d", got, p.Err(), tt.wantSignal)
			}
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Errorf("signal after exit: %v", err)
			}
			if err := p.Kill(); err != nil {
				t.Errorf("kill after exit: %v", err)
			}
		})
	}
}

func TestStopAll(t *testing.T) {
	g := &Group{LogDir: t.TempDir()}
	var started []*Proc
	for i, mode := range []string{"sleep", "ignore-term", "sleep", "exit"} {
		p := startChild(t, g, "child-"+strconv.Itoa(i), mode, "PROCS_TEST_VALUE=v"+strconv.Itoa(i))
		t.Cleanup(func() { _ = p.Kill() }) // in case StopAll misses it
		started = append(started, p)
	}
	for _, p := range started[:3] {
		waitLog(t, p, "ready")
	}
	if !started[3].Wait(10 * time.Second) {
		t.Fatal("exiting child still running")
	}
	err := g.StopAll(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "child-1") || strings.Count(err.Error(), "was killed") != 1 {
		t.Errorf("StopAll: %v, want one error, for child-1 which ignores SIGTERM", err)
	}
	for i, p := range started {
		if !p.Exited() {
			t.Errorf("%s (pid %d) still running", p.Name(), p.PID())
		}
		if i == 3 {
			continue
		}
		if want := "value=v" + strconv.Itoa(i); i != 1 && !strings.Contains(p.LogTail(), want) {
			t.Errorf("%s log %q, want the environment given at start (%s)", p.Name(), p.LogTail(), want)
		}
	}
	if err := g.StopAll(time.Second); err != nil {
		t.Errorf("second StopAll: %v", err)
	}
}

func TestLogTail(t *testing.T) {
	tests := []struct {
		name   string
		starts int
		mode   string
		want   func(string) bool
	}{
		{name: "trimmed output", starts: 1, mode: "exit", want: func(s string) bool { return s == "bye" }},
		{name: "appended across restarts", starts: 2, mode: "exit", want: func(s string) bool { return s == "bye\nbye" }},
		{name: "long log keeps its end", starts: 1, mode: "chatty", want: func(s string) bool {
			return len(s) == tailBytes-1 && strings.HasSuffix(s, "line 0999") && !strings.Contains(s, "line 0000")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t)
			var p *Proc
			for range tt.starts {
				p = startChild(t, g, "child", tt.mode)
				if !p.Wait(10 * time.Second) {
					t.Fatal("child did not exit")
				}
			}
			if got := p.LogTail(); !tt.want(got) {
				t.Errorf("log tail %q (%d bytes)", got, len(got))
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	tests := []struct {
		name    string
		logDir  string
		bin     string
		wantErr string
	}{
		{name: "missing program", bin: filepath.Join(t.TempDir(), "nothing-here"), wantErr: "start child: "},
		{name: "missing log directory", logDir: filepath.Join(t.TempDir(), "absent"), bin: os.Args[0], wantErr: "open log of child: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &Group{LogDir: tt.logDir}
			if g.LogDir == "" {
				g.LogDir = t.TempDir()
			}
			p, err := g.Start("child", StartOptions{}, tt.bin)
			if p != nil {
				_ = p.Kill()
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("Start: %v, want an error starting with %q", err, tt.wantErr)
			}
			if err := g.StopAll(time.Second); err != nil {
				t.Errorf("StopAll with nothing started: %v", err)
			}
		})
	}
}

// firstCPU returns the first CPU this process may run on.
func firstCPU(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	list := strings.TrimPrefix(cpusAllowed(b), "Cpus_allowed_list: ")
	cpu, _, _ := strings.Cut(list, ",")
	cpu, _, _ = strings.Cut(cpu, "-")
	if cpu == "" {
		t.Fatalf("no Cpus_allowed_list in /proc/self/status")
	}
	return cpu
}

func TestCPU(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("taskset not found: %v", err)
		}
		t.Skipf("taskset not found: %v", err)
	}
	cpu := firstCPU(t)
	tests := []struct {
		name    string
		cpu     string
		wantLog string // "" to check only the id
		wantErr bool   // taskset exits at once
	}{
		{name: "pinned through taskset", cpu: cpu, wantLog: "Cpus_allowed_list: " + cpu},
		{name: "not pinned", cpu: ""},
		{name: "bad CPU list", cpu: "not-a-cpu", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t)
			p, err := g.Start("child", StartOptions{CPU: tt.cpu, Env: []string{childEnv + "=affinity"}}, os.Args[0])
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantErr {
				if !p.Wait(10*time.Second) || p.Err() == nil || p.LogTail() == "" {
					t.Errorf("taskset with a bad CPU list: exited %v, err %v, log %q", p.Exited(), p.Err(), p.LogTail())
				}
				return
			}
			log := waitLog(t, p, "ready")
			if want := fmt.Sprintf("ready pid=%d ", p.PID()); !strings.Contains(log, want) {
				t.Errorf("log %q, want %q: the id must be the program's", log, want)
			}
			if !strings.Contains(log, tt.wantLog) {
				t.Errorf("log %q, want %q", log, tt.wantLog)
			}
		})
	}
}

// gone reports whether pid has ended (no such process, or a zombie).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

func TestChildDiesWithParent(t *testing.T) {
	dir := t.TempDir()
	g := newGroup(t)
	parent := startChild(t, g, "parent", "parent", "PROCS_TEST_DIR="+dir)
	log := waitLog(t, parent, "grandchild ")
	_, s, _ := strings.Cut(log, "grandchild ")
	pid, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("parent log %q: %v", log, err)
	}
	t.Cleanup(func() {
		if !gone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if gone(pid) {
		t.Fatalf("grandchild %d not running before its parent died", pid)
	}
	if err := parent.Kill(); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 10*time.Second, fmt.Sprintf("grandchild %d to end after its parent was killed", pid), func() bool { return gone(pid) })
}
