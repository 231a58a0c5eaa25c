//go:build !linux

package usage

import "os"

// mapSeqFile: no mapping here; the "seq" file is written with pwrite.
func mapSeqFile(*os.File) []byte { return nil }

func unmapSeqFile([]byte) {}
