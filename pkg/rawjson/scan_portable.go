//go:build !(goexperiment.simd && amd64)

package rawjson

// haveSIMD is false: this build reads strings a word at a time (see
// scan_simd.go for the vector reader).
const haveSIMD = false

// blocks is the vector string reader; this build has none and never
// calls it.
func (s *scanner) blocks(i int) (int, bool) { return i, false }

// validUTF8 is the whole-text UTF-8 check of the vector reader; this build
// checks UTF-8 while reading each string and never calls it.
func validUTF8([]byte) bool { return true }

// have512 is false: no vector reader in this build.
const have512 = false

func (s *scanner) blocks512(i int) (int, bool) { return i, false }
