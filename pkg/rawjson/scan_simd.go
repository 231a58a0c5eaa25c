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

// Vector constants, read from memory (a broadcast costs more than a load,
// and blocks runs once per string): 32 copies of a byte, and the two
// 16-byte tables of classify, each twice (VPSHUFB looks up within each
// 128-bit half).
var (
	vQuote   = fill('"')
	vBslash  = fill('\\')
	vCtlMax  = fill(0x1F)
	vU       = fill('u')
	vNibble  = fill(0x0F)
	vEndBits = fill(classEnd)
	vHexBits = fill(classHex)
	vZero    [32]byte
	vFour    = [32]byte{0: 4, 4: 4, 8: 4, 12: 4, 16: 4, 20: 4, 24: 4, 28: 4} // 4 in each 32-bit lane

	vLoClass, vHiClass = classTables()
)

func fill(c byte) (v [32]byte) {
	for i := range v {
		v[i] = c
	}
	return v
}

// Byte classes, one bit per class and high nibble, so that a byte is in a
// class exactly when the bit is set in both the table of its low nibble
// and that of its high one: the bytes an escape may end with (", /, \, b,
// f, n, r, t and u) and the hexadecimal digits.
const (
	classEnd2 = 1 << iota // " /
	classEnd5             // \
	classEnd6             // b f n
	classEnd7             // r t u
	classHex3             // 0-9
	classHex4             // A-F
	classHex6             // a-f

	classEnd = classEnd2 | classEnd5 | classEnd6 | classEnd7
	classHex = classHex3 | classHex4 | classHex6
)

// classTables builds the low- and high-nibble tables of the byte classes.
func classTables() (lo, hi [32]byte) {
	add := func(set string, bit map[byte]byte) {
		for _, c := range []byte(set) {
			k := bit[c>>4]
			for half := 0; half < 32; half += 16 {
				lo[half+int(c&15)] |= k
				hi[half+int(c>>4)] |= k
			}
		}
	}
	add(`"/\bfnrtu`, map[byte]byte{2: classEnd2, 5: classEnd5, 6: classEnd6, 7: classEnd7})
	add("0123456789ABCDEFabcdef", map[byte]byte{3: classHex3, 4: classHex4, 6: classHex6})
	return lo, hi
}

// classify returns the class bits of each byte of v. The high nibbles
// come from a shift of each 32-bit lane by the counts in four (VPSRLVD):
// a shift by a count in a general register (VPSRLW) is compiled with a
// legacy-encoded move into the vector register, which costs this machine
// about 100 times the shift itself.
func classify(v, lo, hi, nibble, four archsimd.Uint8x32) archsimd.Uint8x32 {
	l := lo.PermuteOrZeroGrouped(v.And(nibble).AsInt8x32())
	h := hi.PermuteOrZeroGrouped(v.AsUint32x8().ShiftRight(four.AsUint32x8()).AsUint8x32().And(nibble).AsInt8x32())
	return l.And(h)
}

// outside returns the mask of the bytes of a block whose classes (clo,
// chi: its halves') have none of bits.
func outside(clo, chi, bits, zero archsimd.Uint8x32) uint64 {
	return join(clo.And(bits).Equal(zero), chi.And(bits).Equal(zero))
}

// blocks reads a string from b[i] (inside it, not within an escape
// sequence) 64 bytes at a time. Each block becomes bit masks, one bit per
// byte: quotes, backslashes, control bytes, and, where the block has an
// escape, the bytes an escape may end with and the hexadecimal digits
// (classify: two table lookups a half). From the backslashes it works out
// which bytes are escaped (escapedBytes), so the first quote that is not
// escaped ends the string, with no branch per escape, and each \u is
// checked for its four digits from the masks. It returns the index past
// the closing quote and true, or false and the index to go on from with
// strRun: where a block holds something it leaves to strRun (a control
// byte, an escape other than the two-byte ones and \uXXXX with four hex
// digits in the text), or where fewer than 64 bytes are left. UTF-8 is not
// checked here (str hands the text read to checkUTF8 a window at a time).
func (s *scanner) blocks(i int) (int, bool) {
	b := s.b
	quote, bslash, ctlMax := archsimd.LoadUint8x32(&vQuote), archsimd.LoadUint8x32(&vBslash), archsimd.LoadUint8x32(&vCtlMax)
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
		q &^= esc
		before := ^uint64(0) // the bytes of the block before the closing quote
		if q != 0 {
			before = q&-q - 1
		}
		bad := ctl
		if esc &= before; esc != 0 {
			s.esc = true
			nibble, zero := archsimd.LoadUint8x32(&vNibble), archsimd.LoadUint8x32(&vZero)
			loClass, hiClass := archsimd.LoadUint8x32(&vLoClass), archsimd.LoadUint8x32(&vHiClass)
			four := archsimd.LoadUint8x32(&vFour)
			clo, chi := classify(lo, loClass, hiClass, nibble, four), classify(hi, loClass, hiClass, nibble, four)
			// \u and four hex digits: a \u fails when a byte of the four
			// after it is not one. Without a branch: whether a block has
			// a \u is as good as random in pasted code.
			u := archsimd.LoadUint8x32(&vU)
			ue := esc & join(lo.Equal(u), hi.Equal(u))
			nh := outside(clo, chi, archsimd.LoadUint8x32(&vHexBits), zero)
			bad |= esc&outside(clo, chi, archsimd.LoadUint8x32(&vEndBits), zero) | ue&(nh>>1|nh>>2|nh>>3|nh>>4)
			if ue>>60 != 0 {
				bad |= spanningHex(b, i, ue>>60<<60)
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

// spanningHex returns the \u of ue (escaped 'u's among the last four bytes
// of the block at b[i]) whose four digits, running into the next block,
// are not all hexadecimal. Both vector readers call it, rarely. It is
// inlined, and has no call but its bounds checks' panics, so that the
// readers keep their vector constants in registers: a call in their loops
// costs each call of theirs the spill of those registers.
func spanningHex(b []byte, i int, ue uint64) (bad uint64) {
	for ; ue != 0; ue &= ue - 1 {
		p := i + bits.TrailingZeros64(ue)
		if p+5 > len(b) || !allHex(b[p+1:p+5]) {
			bad |= ue & -ue
		}
	}
	return bad
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
