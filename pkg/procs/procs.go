// Package procs supervises the child processes of the chaos rig and the
// benchmark suite: each one logs to its own file, can be signalled, waited
// for and stopped (SIGTERM, then SIGKILL after a grace period), and the
// Group that started them ends every one still running, by its id, on the
// way out. Children get SIGKILL if the supervising program dies first, so an
// interrupted run leaves nothing behind.
package procs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// tailBytes is how much of the end of a log LogTail returns.
const tailBytes = 2000

// Proc is one started child process.
type Proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // what cmd.Wait returned; read after done is closed
}

// Name returns the name the process was started with.
func (p *Proc) Name() string { return p.name }

// PID returns the process id. A process pinned to a CPU is started through
// taskset, which execs the program in place: the id is the program's.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns how the process ended (the error of exec.Cmd.Wait: nil for
// exit status 0), or nil while it runs.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Signal sends sig to the process, by its id. A process that has already
// ended is not an error.
func (p *Proc) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s (pid %d): %w", p.name, p.PID(), err)
	}
	return nil
}

// Wait waits up to d for the process to exit and reports whether it did.
func (p *Proc) Wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Stop sends SIGTERM, waits up to grace, then kills the process. It
// returns an error when the process had to be killed.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if p.Wait(grace) {
		return nil
	}
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("%s (pid %d) did not stop within %s and was killed", p.name, p.PID(), grace)
}

// LogTail returns the last 2000 bytes of the process's log, trimmed, for
// error messages; "" when the log cannot be read.
func (p *Proc) LogTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
	}
	return string(bytes.TrimSpace(b))
}

// StartOptions are the optional settings of Group.Start.
type StartOptions struct {
	// Env is added to this program's environment.
	Env []string
	// CPU, when set, is a CPU list (taskset -c syntax) the process is
	// pinned to; taskset must then be on the PATH.
	CPU string
}

// Group owns every process it starts and ends them all with StopAll. The
// zero value with LogDir set is ready to use; a Group is safe for
// concurrent use.
type Group struct {
	// LogDir holds each process's output in NAME.log.
	LogDir string

	mu   sync.Mutex // guards list
	list []*Proc
}

// Start runs bin with args, its output appended to LogDir/name.log (so a
// restarted process keeps its earlier log). The child gets SIGKILL if this
// program dies first.
func (g *Group) Start(name string, opts StartOptions, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(g.LogDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer f.Close() // the child has its own copy
	cmd := Command(opts.CPU, bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	g.mu.Lock()
	g.list = slices.DeleteFunc(g.list, (*Proc).Exited) // restarts leave no trail
	g.list = append(g.list, p)
	g.mu.Unlock()
	return p, nil
}

// StopAll stops every process still running, the last started first, each
// with Stop(grace). It returns the errors of all the stops.
func (g *Group) StopAll(grace time.Duration) error {
	g.mu.Lock()
	list := g.list
	g.list = nil
	g.mu.Unlock()
	var errs []error
	for _, p := range slices.Backward(list) {
		errs = append(errs, p.Stop(grace))
	}
	return errors.Join(errs...)
}

// Command returns the command running bin with args, through taskset on
// cpu when cpu is set. taskset execs bin in place, so the started
// process's id is bin's.
func Command(cpu, bin string, args ...string) *exec.Cmd {
	if cpu == "" {
		return exec.Command(bin, args...)
	}
	return exec.Command("taskset", append([]string{"-c", cpu, bin}, args...)...)
}
