package testkit

import (
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitReturnsOnceTheConditionHolds(t *testing.T) {
	var polls atomic.Int32
	Wait(t, time.Minute, "the third poll", func() bool { return polls.Add(1) == 3 })
	if n := polls.Load(); n != 3 {
		t.Fatalf("cond polled %d times, want 3", n)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records instead of ending the
// test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = format
	for _, a := range args {
		if s, ok := a.(string); ok {
			r.msg += " " + s
		}
	}
	panic(r)
}

func TestWaitFailsNamingWhatItWaitedFor(t *testing.T) {
	r := &fatalRecorder{TB: t}
	func() {
		defer func() {
			if v := recover(); v != r {
				t.Fatalf("Wait did not fail: recovered %v", v)
			}
		}()
		Wait(r, 10*time.Millisecond, "the spool to drain", func() bool { return false })
	}()
	if !strings.Contains(r.msg, "the spool to drain") {
		t.Fatalf("failure %q does not name what was awaited", r.msg)
	}
}

// TestOnlyTestsImport: no program or library of the module imports a test
// helper package (testkit, or the mock upstream outside its own programs).
func TestOnlyTestsImport(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "github.com/tollgate/tollgate/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, imp := range strings.Fields(imports) {
			if imp == "github.com/tollgate/tollgate/pkg/testkit" {
				t.Errorf("%s imports %s outside its tests", pkg, imp)
			}
		}
	}
}
