//go:build goexperiment.simd && amd64

package rawjson

import (
	"math/bits"
	"simd/archsimd"

	asmutf8 "github.com/segmentio/asm/utf8"
)

// haveSIMD: the vector string reader runs (this build has it, and the
// machine has AVX2).
var haveSIMD = archsimd.X86.AVX2()

// validUTF8 reports whether b is UTF-8, with vector instructions
// (segmentio/asm): Scan's check of its strings when blocks read them.
func validUTF8(b []byte) bool { return asmutf8.Valid(b) }

// evenBits has the bits of the even byte positions of a block.
const evenBits = 0x5555555555555555

// blocks reads a string from b[i] (inside it, not within an escape
// sequence) 64 bytes at a time. Each block becomes bit masks, one bit per
// byte: quotes, backslashes, control bytes and the bytes an escape may
// end with. From the backslashes it works out which bytes are escaped
// (escapedBytes), so the first quote that is not escaped ends the string,
// with no branch per escape. It returns the index past the closing quote
// and true, or false and the index to go on from with strRun: where a
// block holds something it leaves to strRun (a control byte, an escape
// other than the two-byte ones and \uXXXX with four hex digits in the
// text), or where fewer than 64 bytes are left. UTF-8 is not checked here
// (Scan checks the whole text once).
func (s *scanner) blocks(i int) (int, bool) {
	b := s.b
	var (
		quote  = archsimd.BroadcastUint8x32('"')
		bslash = archsimd.BroadcastUint8x32('\\')
		ctlMax = archsimd.BroadcastUint8x32(0x1F)
		slash  = archsimd.BroadcastUint8x32('/')
		lb     = archsimd.BroadcastUint8x32('b')
		lf     = archsimd.BroadcastUint8x32('f')
		ln     = archsimd.BroadcastUint8x32('n')
		lr     = archsimd.BroadcastUint8x32('r')
		lt     = archsimd.BroadcastUint8x32('t')
		lu     = archsimd.BroadcastUint8x32('u')
	)
	// carry is 1 when the previous block ended with a backslash that
	// escapes this block's first byte.
	var carry uint64
	for ; i+blockLen <= len(b); i += blockLen {
		blk := (*[blockLen]byte)(b[i : i+blockLen])
		lo := archsimd.LoadUint8x32((*[32]uint8)(blk[:32]))
		hi := archsimd.LoadUint8x32((*[32]uint8)(blk[32:]))
		q, bs := join(lo.Equal(quote), hi.Equal(quote)), join(lo.Equal(bslash), hi.Equal(bslash))
		ctl := join(lo.Min(ctlMax).Equal(lo), hi.Min(ctlMax).Equal(hi))
		var esc, escaping uint64
		if bs|carry != 0 {
			esc, escaping = escapedBytes(bs, carry)
		}
		escQuote := q // a quote may be escaped: \"
		q &^= esc
		before := ^uint64(0) // the bytes of the block before the closing quote
		if q != 0 {
			before = q&-q - 1
		}
		bad := ctl
		if esc &= before; esc != 0 {
			s.esc = true
			u := join(lo.Equal(lu), hi.Equal(lu))
			ends := u | bs | escQuote |
				join(lo.Equal(slash).Or(lo.Equal(lb)).Or(lo.Equal(lf)).Or(lo.Equal(ln)).Or(lo.Equal(lr)).Or(lo.Equal(lt)),
					hi.Equal(slash).Or(hi.Equal(lb)).Or(hi.Equal(lf)).Or(hi.Equal(ln)).Or(hi.Equal(lr)).Or(hi.Equal(lt)))
			bad |= esc &^ ends
			for ue := esc & u; ue != 0; ue &= ue - 1 {
				// \u and four hex digits, which may run into the next block.
				p := i + bits.TrailingZeros64(ue)
				if p+5 > len(b) || !allHex(b[p+1:p+5]) {
					bad |= ue & -ue
				}
			}
		}
		if bad&before != 0 {
			return i - int(carry), false
		}
		if q != 0 {
			return i + bits.TrailingZeros64(q) + 1, true
		}
		carry = escaping >> 63
	}
	// From the escaping backslash when the last block ended with one.
	return i - int(carry), false
}

// join makes the 64-bit mask of a block from its halves' masks.
func join(lo, hi archsimd.Mask8x32) uint64 {
	return uint64(lo.ToBits()) | uint64(hi.ToBits())<<32
}

// escapedBytes works out, from the backslashes bs of a block and carry (1
// when the block's first byte is escaped by the block before), the bytes
// that are escaped (the byte after a backslash that is not itself
// escaped) and the backslashes that escape. In a run of backslashes the
// first escapes the second, the third the fourth, and so on: the run's
// escaping backslashes are those at an even distance from its start, so
// at even positions for a run that starts at an even position and at odd
// ones otherwise. Adding a run's first bit to the mask clears the whole
// run (the carry ends just past it), which marks the runs that start at
// even positions without a loop over them.
func escapedBytes(bs, carry uint64) (esc, escaping uint64) {
	bs &^= carry // an escaped backslash does not escape
	starts := bs &^ (bs << 1)
	evenRuns := bs &^ (bs + starts&evenBits)
	escaping = evenRuns&evenBits | (bs&^evenRuns)&^evenBits
	return escaping<<1 | carry, escaping
}
