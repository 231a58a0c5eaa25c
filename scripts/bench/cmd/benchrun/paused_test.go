package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/procs"
)

// procState is the state letter of pid in /proc/pid/stat (R, S, T, ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// waitState waits until pid is in (or, with not set, out of) state.
func waitState(t *testing.T, pid int, state string, not bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := procState(t, pid)
		if (got == state) != not {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d in state %s", pid, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A paused run stops the servers for the run and resumes them after it,
// also when one of them cannot be paused.
func TestPause(t *testing.T) {
	ps := &procs.Group{LogDir: t.TempDir()}
	defer ps.StopAll(stopGrace)
	start := func(name string) *procs.Proc {
		p, err := ps.Start(name, procs.StartOptions{}, "/bin/sleep", "30")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := start("a"), start("b")

	resume, err := pause([]*procs.Proc{a, b})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, a.PID(), "T", false)
	waitState(t, b.PID(), "T", false)
	resume()
	waitState(t, a.PID(), "T", true)
	waitState(t, b.PID(), "T", true)

	// The second process is gone: the first must not stay stopped.
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	b.Wait(5 * time.Second)
	if _, err := pause([]*procs.Proc{a, b}); err == nil || !strings.Contains(err.Error(), "pause b") {
		t.Fatalf("pause with an exited process: err %v", err)
	}
	waitState(t, a.PID(), "T", true)
}
