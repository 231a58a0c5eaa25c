//go:build goexperiment.simd && amd64

package rawjson

import (
	"math/bits"
	"simd/archsimd"
)

// have512: blocks512 reads strings instead of blocks (the machine has
// AVX-512: F, CD, BW, DQ and VL). A variable so that the tests can run
// both vector readers on one machine.
var have512 = haveSIMD && archsimd.X86.AVX512()

// The constants of blocks512, 64 bytes each (classTables' two 16-byte
// tables four times).
var (
	wQuote   = fill64('"')
	wBslash  = fill64('\\')
	wSpace   = fill64(' ')
	wU       = fill64('u')
	wNibble  = fill64(0x0F)
	wEndBits = fill64(classEnd)
	wHexBits = fill64(classHex)
	wFour    = four64()

	wLoClass, wHiClass = classTables64()
)

func fill64(c byte) (v [64]byte) {
	for i := range v {
		v[i] = c
	}
	return v
}

func four64() (v [64]byte) {
	for i := 0; i < len(v); i += 4 {
		v[i] = 4
	}
	return v
}

func classTables64() (lo, hi [64]byte) {
	l, h := classTables()
	copy(lo[:], l[:])
	copy(lo[32:], l[:])
	copy(hi[:], h[:])
	copy(hi[32:], h[:])
	return lo, hi
}

// classify64 is classify on one 64-byte vector.
func classify64(v, lo, hi, nibble, four archsimd.Uint8x64) archsimd.Uint8x64 {
	l := lo.PermuteOrZeroGrouped(v.And(nibble).AsInt8x64())
	h := hi.PermuteOrZeroGrouped(v.AsUint32x16().ShiftRight(four.AsUint32x16()).AsUint8x64().And(nibble).AsInt8x64())
	return l.And(h)
}

// blocks512 is blocks with one 64-byte vector a block: each comparison
// gives the block's mask at once (a mask register), where blocks joins two
// 32-byte halves. Same contract, same verdicts.
func (s *scanner) blocks512(i int) (int, bool) {
	b := s.b
	quote, bslash, space := archsimd.LoadUint8x64(&wQuote), archsimd.LoadUint8x64(&wBslash), archsimd.LoadUint8x64(&wSpace)
	var carry uint64
	for ; i+blockLen <= len(b); i += blockLen {
		v := archsimd.LoadUint8x64((*[blockLen]byte)(b[i : i+blockLen]))
		q, bs, ctl := v.Equal(quote).ToBits(), v.Equal(bslash).ToBits(), v.Less(space).ToBits()
		var esc, escaping uint64
		if bs|carry != 0 {
			esc, escaping = escapedBytes(bs, carry)
		}
		q &^= esc
		before := ^uint64(0)
		if q != 0 {
			before = q&-q - 1
		}
		bad := ctl
		if esc &= before; esc != 0 {
			s.esc = true
			nibble, four := archsimd.LoadUint8x64(&wNibble), archsimd.LoadUint8x64(&wFour)
			c := classify64(v, archsimd.LoadUint8x64(&wLoClass), archsimd.LoadUint8x64(&wHiClass), nibble, four)
			ue := esc & v.Equal(archsimd.LoadUint8x64(&wU)).ToBits()
			nh := c.And(archsimd.LoadUint8x64(&wHexBits)).Equal(archsimd.Uint8x64{}).ToBits()
			bad |= esc&c.And(archsimd.LoadUint8x64(&wEndBits)).Equal(archsimd.Uint8x64{}).ToBits() | ue&(nh>>1|nh>>2|nh>>3|nh>>4)
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
	return i - int(carry), false
}
