package usage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func openTestSpool(t *testing.T, dir string, maxBytes int64) *spool {
	t.Helper()
	s, err := openSpool(dir, maxBytes)
	if err != nil {
		t.Fatalf("open spool: %v", err)
	}
	return s
}

func record(i int) []byte { return fmt.Appendf(nil, "record-%03d", i) }

func appendRecords(t *testing.T, s *spool, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := s.append(record(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// drainAll reads and commits the spool batch by batch, returning the
// payloads in order.
func drainAll(t *testing.T, s *spool, batch int) []string {
	t.Helper()
	var out []string
	for s.hasData() {
		recs, next, err := s.read(batch)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		for _, r := range recs {
			out = append(out, string(r.payload))
		}
		if next == s.rpos {
			t.Fatalf("read made no progress at %+v with %d bytes unread", next, s.unread.Load())
		}
		if err := s.commit(next); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	return out
}

func names(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, string(record(i)))
	}
	return out
}

func without(list []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return slices.Contains(drop, s) })
}

func TestSpoolRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		maxBytes int64
		records  int
		batch    int
		reopenAt int // commit this many batches, close and reopen before the rest
	}{
		{name: "one segment", maxBytes: 1 << 20, records: 10, batch: 3},
		{name: "many segments", maxBytes: 400, records: 20, batch: 4},
		{name: "reopen mid drain", maxBytes: 1 << 20, records: 10, batch: 3, reopenAt: 2},
		{name: "reopen mid drain many segments", maxBytes: 400, records: 20, batch: 3, reopenAt: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTestSpool(t, dir, tt.maxBytes)
			appendRecords(t, s, 0, tt.records)
			var got []string
			for range tt.reopenAt {
				recs, next, err := s.read(tt.batch)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				for _, r := range recs {
					got = append(got, string(r.payload))
				}
				if err := s.commit(next); err != nil {
					t.Fatalf("commit: %v", err)
				}
			}
			if tt.reopenAt > 0 {
				if err := s.close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				s = openTestSpool(t, dir, tt.maxBytes)
			}
			got = append(got, drainAll(t, s, tt.batch)...)
			if want := names(0, tt.records); !slices.Equal(got, want) {
				t.Fatalf("drained %q\nwant %q", got, want)
			}
			if s.unread.Load() != 0 || s.disk != 0 {
				t.Errorf("after drain: unread %d, disk %d; want 0, 0", s.unread.Load(), s.disk)
			}
			if segs := spoolFiles(t, dir, segExt); len(segs) != 1 {
				t.Errorf("segment files after drain: %v, want one empty", segs)
			}
			// The spool keeps working after compaction and a reopen.
			appendRecords(t, s, 100, 102)
			if err := s.close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			s = openTestSpool(t, dir, tt.maxBytes)
			defer s.close()
			if got, want := drainAll(t, s, tt.batch), names(100, 102); !slices.Equal(got, want) {
				t.Fatalf("after reopen drained %q, want %q", got, want)
			}
		})
	}
}

func TestSpoolFull(t *testing.T) {
	rec := int64(recHeader + len(record(0)))
	tests := []struct {
		name     string
		maxBytes int64
		fits     int
	}{
		{name: "exact multiple", maxBytes: 5 * rec, fits: 5},
		{name: "with slack", maxBytes: 5*rec + rec/2, fits: 5},
		{name: "smaller than a record", maxBytes: rec - 1, fits: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTestSpool(t, t.TempDir(), tt.maxBytes)
			defer s.close()
			appendRecords(t, s, 0, tt.fits)
			if err := s.append(record(99)); !errors.Is(err, errSpoolFull) {
				t.Fatalf("append past the limit: %v, want errSpoolFull", err)
			}
			if s.disk > tt.maxBytes {
				t.Errorf("disk %d over limit %d", s.disk, tt.maxBytes)
			}
			if tt.fits == 0 {
				return
			}
			// Draining frees whole segments, which makes room again.
			if got := drainAll(t, s, 2); !slices.Equal(got, names(0, tt.fits)) {
				t.Fatalf("drained %q", got)
			}
			if err := s.append(record(99)); err != nil {
				t.Fatalf("append after drain: %v", err)
			}
		})
	}
}

func TestSpoolTornTail(t *testing.T) {
	recLen := int64(recHeader + len(record(0)))
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, size int64)
		want   []string
	}{
		{
			name:   "cut inside the header",
			damage: func(t *testing.T, path string, size int64) { truncate(t, path, size-recLen+3) },
			want:   names(0, 2),
		},
		{
			name:   "cut inside the payload",
			damage: func(t *testing.T, path string, size int64) { truncate(t, path, size-4) },
			want:   names(0, 2),
		},
		{
			name:   "zeros after the last record",
			damage: func(t *testing.T, path string, size int64) { appendBytes(t, path, make([]byte, 4096)) },
			want:   names(0, 3),
		},
		{
			name: "header promising more than was written",
			damage: func(t *testing.T, path string, size int64) {
				appendBytes(t, path, binary.LittleEndian.AppendUint32(nil, 200))
				appendBytes(t, path, []byte{1, 2, 3, 4, 5, 6, 7})
			},
			want: names(0, 3),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTestSpool(t, dir, 1<<20)
			appendRecords(t, s, 0, 3)
			if err := s.close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			path := s.segPath(s.segs[len(s.segs)-1].id)
			tt.damage(t, path, 3*recLen)

			s = openTestSpool(t, dir, 1<<20)
			defer s.close()
			if n := s.torn.Load(); n != 1 {
				t.Errorf("torn = %d, want 1", n)
			}
			if bad := spoolFiles(t, dir, badExt); len(bad) != 1 {
				t.Errorf(".bad files %v, want one holding the torn bytes", bad)
			}
			// New records go after the last complete one.
			appendRecords(t, s, 3, 5)
			want := append(slices.Clone(tt.want), names(3, 5)...)
			if got := drainAll(t, s, 2); !slices.Equal(got, want) {
				t.Fatalf("drained %q\nwant %q", got, want)
			}
			if n := s.corrupt.Load(); n != 0 {
				t.Errorf("corrupt = %d, want 0", n)
			}
		})
	}
}

func TestSpoolCorruptRecord(t *testing.T) {
	recLen := int64(recHeader + len(record(0)))
	all := names(0, 5)
	tests := []struct {
		name     string
		maxBytes int64 // small values spread the records over several segments
		at       int64 // offset of the damaged byte from the start of record 2's segment position
		value    func(old byte) byte
		want     []string
		badBytes int64
	}{
		{
			name: "payload bit flip", maxBytes: 1 << 20, at: 2*recLen + recHeader + 3,
			value: func(b byte) byte { return b ^ 0x10 }, want: without(all, "record-002"), badBytes: recLen,
		},
		{
			name: "checksum changed", maxBytes: 1 << 20, at: 2*recLen + 5,
			value: func(b byte) byte { return b + 1 }, want: without(all, "record-002"), badBytes: recLen,
		},
		{
			name: "length too large", maxBytes: 1 << 20, at: 2*recLen + 3,
			value: func(byte) byte { return 0x7f }, want: without(all, "record-002"), badBytes: recLen,
		},
		{
			name: "length changed by one", maxBytes: 1 << 20, at: 2 * recLen,
			value: func(b byte) byte { return b + 1 }, want: without(all, "record-002"), badBytes: recLen,
		},
		{
			name: "first record", maxBytes: 1 << 20, at: recHeader,
			value: func(b byte) byte { return ^b }, want: without(all, "record-000"), badBytes: recLen,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTestSpool(t, dir, tt.maxBytes)
			appendRecords(t, s, 0, 5)
			if err := s.close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			path := s.segPath(s.segs[0].id)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[tt.at] = tt.value(b[tt.at])
			if err := os.WriteFile(path, b, 0o640); err != nil {
				t.Fatal(err)
			}

			s = openTestSpool(t, dir, tt.maxBytes)
			defer s.close()
			if got := drainAll(t, s, 2); !slices.Equal(got, tt.want) {
				t.Fatalf("drained %q\nwant %q", got, tt.want)
			}
			if n := s.corrupt.Load(); n != 1 {
				t.Errorf("corrupt = %d, want 1", n)
			}
			if n := s.torn.Load(); n != 0 {
				t.Errorf("torn = %d, want 0", n)
			}
			bad := spoolFiles(t, dir, badExt)
			if len(bad) != 1 {
				t.Fatalf(".bad files %v, want 1", bad)
			}
			fi, err := os.Stat(filepath.Join(dir, bad[0]))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != tt.badBytes {
				t.Errorf(".bad file holds %d bytes, want %d", fi.Size(), tt.badBytes)
			}
		})
	}
}

func TestSpoolOffsetFileDamaged(t *testing.T) {
	tests := []struct {
		name   string
		damage func(path string) error
	}{
		{name: "missing", damage: os.Remove},
		{name: "garbage", damage: func(p string) error { return os.WriteFile(p, []byte("not an offset file!!"), 0o640) }},
		{name: "empty", damage: func(p string) error { return os.WriteFile(p, nil, 0o640) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTestSpool(t, dir, 1<<20)
			appendRecords(t, s, 0, 6)
			recs, next, err := s.read(2)
			if err != nil || len(recs) != 2 {
				t.Fatalf("read: %d records, %v", len(recs), err)
			}
			if err := s.commit(next); err != nil {
				t.Fatal(err)
			}
			if err := s.close(); err != nil {
				t.Fatal(err)
			}
			if err := tt.damage(filepath.Join(dir, offsetName)); err != nil {
				t.Fatal(err)
			}
			// Without a usable offset the spool starts over: drained events
			// are published again (and deduplicated), none is skipped.
			s = openTestSpool(t, dir, 1<<20)
			defer s.close()
			if got := drainAll(t, s, 4); !slices.Equal(got, names(0, 6)) {
				t.Fatalf("drained %q", got)
			}
		})
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func spoolFiles(t testing.TB, dir, ext string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read spool dir: %v", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ext) {
			out = append(out, e.Name())
		}
	}
	return out
}
