package usage

import (
	"fmt"
	"os"
	"runtime/debug"
)

// seqFile is the producer's "seq" file, overwritten in place each time a
// batch gets its seq. Where the system allows it (Linux), the file is also
// mapped shared into memory and a write is a copy into the mapping: the
// same page-cache page a pwrite fills, so it outlives a SIGKILL just the
// same, without a system call per batch. (A pwrite updates the file's
// modification time and so its inode each time; on ext4 that cost about
// 40 µs per batch, a good part of what a gateway at a few hundred requests
// a second spends on its usage events.)
//
// A copy cut short by a SIGKILL leaves a record whose checksum fails; the
// next start then continues above the ceiling, as after a machine crash.
// A fault on the mapping (the file truncated under it, or a full disk that
// cannot back the page) is recovered: the mapping is dropped and the file
// is written with pwrite from then on, which reports the error.
type seqFile struct {
	f *os.File
	m []byte // the mapping, nil when there is none
}

func openSeqFile(path string) (*seqFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open seq file: %w", err)
	}
	s := &seqFile{f: f}
	if fi, err := f.Stat(); err == nil && fi.Size() != seqFileSize {
		// A new (or damaged) file: give it its size with real blocks, so
		// the mapping never needs the disk to allocate one. Zeros do not
		// decode, as an absent file.
		if err := f.Truncate(0); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("size seq file: %w", err)
		}
		if _, err := f.WriteAt(make([]byte, seqFileSize), 0); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("size seq file: %w", err)
		}
	}
	s.m = mapSeqFile(f)
	return s, nil
}

// write overwrites the file with b (seqFileSize bytes).
func (s *seqFile) write(b []byte) error {
	if s.m != nil && s.copyMapped(b) {
		return nil
	}
	_, err := s.f.WriteAt(b, 0)
	return err
}

// copyMapped copies b into the mapping; false when that faulted, and the
// mapping is gone.
func (s *seqFile) copyMapped(b []byte) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			s.unmap()
			ok = false
		}
	}()
	copy(s.m, b)
	return true
}

func (s *seqFile) unmap() {
	if s.m != nil {
		unmapSeqFile(s.m)
		s.m = nil
	}
}

// Sync makes the file durable: fsync writes back the pages dirtied through
// the mapping as well.
func (s *seqFile) Sync() error { return s.f.Sync() }

// Close drops the mapping and closes the file.
func (s *seqFile) Close() error {
	s.unmap()
	return s.f.Close()
}
