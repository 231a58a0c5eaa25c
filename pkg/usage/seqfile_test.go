package usage

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestSeqFileSeenByTheNextStart: what writeSeq wrote is what a start that
// follows a SIGKILL reads from the file (the test reads it through another
// descriptor while the writer is still open, as the next process would).
func TestSeqFileSeenByTheNextStart(t *testing.T) {
	dir := t.TempDir()
	n, err := openNumbering(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer n.f.Close()
	if runtime.GOOS == "linux" && n.f.m == nil {
		t.Fatal("seq file not mapped on Linux")
	}
	for want := uint64(1); want <= 3; want++ {
		if _, _, err := n.next(); err != nil {
			t.Fatal(err)
		}
		seq, _, ok := n.loadSeq()
		if !ok || seq != want {
			t.Fatalf("seq file says %d (ok %v), want %d", seq, ok, want)
		}
	}
	n2, err := openNumbering(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.f.Close()
	if bootID() != [16]byte{} && (n2.last != 3 || n2.resumed) {
		t.Errorf("next start: last %d resumed %v, want 3 not resumed", n2.last, n2.resumed)
	}
}

// TestSeqFileFault truncates the "seq" file under its mapping, so the next
// copy into it faults: the fault is recovered, the seq is written with
// pwrite, and the file is right again.
func TestSeqFileFault(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the seq file is mapped on Linux only")
	}
	dir := t.TempDir()
	n, err := openNumbering(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer n.f.Close()
	if _, _, err := n.next(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, seqName), 0); err != nil {
		t.Fatal(err)
	}
	seq, _, err := n.next()
	if err != nil {
		t.Fatalf("next after the truncation: %v", err)
	}
	if n.f.m != nil {
		t.Error("the mapping was kept after a fault")
	}
	if got, _, ok := n.loadSeq(); !ok || got != seq {
		t.Errorf("seq file says %d (ok %v), want %d", got, ok, seq)
	}
}

// TestSeqFileTorn: a record cut short (a SIGKILL in the middle of the
// copy) fails its checksum, and the next start continues above the
// ceiling with its first batch marked resumed, as after a machine crash.
func TestSeqFileTorn(t *testing.T) {
	dir := t.TempDir()
	n, err := openNumbering(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.reserve(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, _, err := n.next(); err != nil {
			t.Fatal(err)
		}
	}
	good := append([]byte(nil), n.encode(5, false)...)
	torn := append([]byte(nil), n.encode(6, false)...)
	copy(torn[len(torn)/2:], good[len(good)/2:]) // the first half of 6 over 5
	if err := n.f.write(torn); err != nil {
		t.Fatal(err)
	}
	_ = n.f.Close()
	n2, err := openNumbering(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.f.Close()
	if n2.last != ceilingBlock || !n2.resumed {
		t.Errorf("after a torn seq: last %d resumed %v, want %d resumed", n2.last, n2.resumed, ceilingBlock)
	}
}

// BenchmarkWriteSeq: the per-batch write of the "seq" file, through the
// mapping and, as the baseline, with pwrite.
func BenchmarkWriteSeq(b *testing.B) {
	for _, mode := range []string{"mapped", "pwrite"} {
		b.Run(mode, func(b *testing.B) {
			n, err := openNumbering(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer n.f.Close()
			if mode == "pwrite" {
				n.f.unmap()
			} else if n.f.m == nil {
				b.Skip("no mapping on this system")
			}
			b.ReportAllocs()
			for b.Loop() {
				n.last++
				if err := n.writeSeq(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
