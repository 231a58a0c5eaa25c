package gemini

import (
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"
)

const hexDigits = "0123456789abcdef"

// rawInner returns the text between the quotes of a raw JSON string token
// (already valid JSON), so it can be copied into another string literal
// without decoding and re-escaping it.
func rawInner(r gjson.Result) string {
	if r.Type != gjson.String || len(r.Raw) < 2 {
		return ""
	}
	return r.Raw[1 : len(r.Raw)-1]
}

// appendUint appends the decimal form of n.
func appendUint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }

// appendHex appends v as 16 lowercase hex digits.
func appendHex(dst []byte, v uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(v>>uint(shift))&0xf])
	}
	return dst
}

// bytesString views b as a string without copying; b must not change while
// the string is in use.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
