// Package testkit holds what tests of several packages share, so that each
// does not grow its own copy: waiting on a condition instead of on a clock.
// Only tests import it (TestOnlyTestsImport checks that).
package testkit

import (
	"testing"
	"time"
)

// Wait polls cond until it holds and returns how long that took. It fails
// tb, naming what it waited for, when cond still does not hold after
// timeout. Polls start 1 ms apart and back off to 20 ms, so a condition
// that holds soon is seen soon and a long wait costs little CPU.
func Wait(tb testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	start := time.Now()
	pause := time.Millisecond
	for !cond() {
		if time.Since(start) > timeout {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pause) // the one poll interval of every test's wait
		pause = min(2*pause, 20*time.Millisecond)
	}
	return time.Since(start)
}
