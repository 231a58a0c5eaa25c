package gemini

import (
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal. It escapes the quote,
// the backslash and control characters below 0x20 (as \u00XX), passes valid
// UTF-8 through unchanged and replaces each invalid byte with \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONInner(dst, s)
	return append(dst, '"')
}

// appendJSONInner appends s escaped for use inside a JSON string literal,
// without the surrounding quotes.
func appendJSONInner(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

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
