package anthropic

import (
	"github.com/tollgate/tollgate/pkg/rawjson"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// This file holds the small JSON tools the translators share: a string
// escaper, a sanitizing copier for already-escaped strings, and a raw member
// scanner that returns values as written, so escaped text is copied rather
// than decoded and re-encoded (gjson unescapes, and allocates, for every
// string it returns).
//
// The scanners expect JSON that was validated first (providers.ValidJSON);
// on anything else they return partial results but never panic.

const hexDigits = "0123456789abcdef"

// appendEscaped appends raw, the text between the quotes of a JSON string
// token as written (escapes kept), for use inside another JSON string. A
// validated token needs no change but for invalid UTF-8, which becomes
// \ufffd; a stray control character is escaped too.
func appendEscaped(dst []byte, raw string) []byte {
	start := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		if c >= 0x20 && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(raw[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, raw[start:i]...)
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, raw[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	return append(dst, raw[start:]...)
}

// appendToken appends a raw JSON string token (quotes included) as a
// quoted, sanitized string; anything but a string token is written as "".
func appendToken(dst []byte, tok string) []byte {
	dst = append(dst, '"')
	if isString(tok) {
		dst = appendEscaped(dst, tok[1:len(tok)-1])
	}
	return append(dst, '"')
}

// isString, inner and member are rawjson's (see there).
func isString(raw string) bool      { return rawjson.IsString(raw) }
func inner(raw string) string       { return rawjson.Inner(raw) }
func member(obj, key string) string { return rawjson.Member(obj, key) }

// eachMember calls f with each key (as written) and raw value of the JSON
// object obj, in order, until f returns false: one pass where several
// member calls would each scan the object.
func eachMember(obj string, f func(key, value string) bool) {
	rawjson.EachMember(obj, func(k, v string, _ int) bool { return f(k, v) })
}

// forEachRaw calls f with the raw text of each element of the JSON array
// arr, stopping early when f returns false. It does nothing when arr is not
// an array.
func forEachRaw(arr string, f func(i int, raw string) bool) { rawjson.EachElem(arr, f) }

// appendRawJSON appends a validated raw JSON value, each invalid UTF-8
// byte replaced by U+FFFD (valid JSON is UTF-8).
func appendRawJSON(dst []byte, raw string) []byte {
	start := 0
	for i := 0; i < len(raw); {
		if raw[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(raw[i:])
		if r != utf8.RuneError || size != 1 {
			i += size
			continue
		}
		dst = append(dst, raw[start:i]...)
		dst = utf8.AppendRune(dst, utf8.RuneError)
		i++
		start = i
	}
	return append(dst, raw[start:]...)
}

// appendUint appends the decimal form of n.
func appendUint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }

// stringBytes views s as bytes without copying; they must not be changed.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// bytesString views b as a string without copying; b must not change while
// the string is in use.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
