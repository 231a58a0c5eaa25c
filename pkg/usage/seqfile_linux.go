package usage

import (
	"os"
	"syscall"
)

// mapSeqFile maps f's first seqFileSize bytes shared, read-write; nil when
// the system refuses (the file is then written with pwrite).
func mapSeqFile(f *os.File) []byte {
	m, err := syscall.Mmap(int(f.Fd()), 0, seqFileSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return m
}

func unmapSeqFile(m []byte) { _ = syscall.Munmap(m) }
