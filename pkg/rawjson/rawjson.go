// Package rawjson reads and writes JSON text without decoding it: Scan,
// the gateway's one validating pass over a request body (issue #18), and
// the scanners and the string writers the translating providers and the
// mock upstream share on their per-chunk paths. It holds the one JSON
// string writer of the translators: AppendString and AppendStringBody
// escape decoded text; AppendRaw, AppendRawString and AppendRawBody copy
// raw (already escaped) JSON. The scanners other than Scan and Valid
// assume valid input (checked beforehand by Scan or providers.ValidJSON);
// they never panic on bad input.
package rawjson

import (
	"strings"
	"unicode/utf8"
)

// AppendString appends s as a quoted JSON string: '"' and '\' are
// escaped, control characters below 0x20 become \n, \r, \t or \u00XX, valid
// UTF-8 passes through and each invalid byte becomes \ufffd.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	return append(AppendStringBody(dst, s), '"')
}

// AppendStringBody appends s escaped as in AppendString, without the
// quotes.
func AppendStringBody(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	return append(dst, s[start:]...)
}

// AppendRaw appends raw, a JSON value that passed validation, unchanged
// but for invalid UTF-8: the validators do not check encoding, so each
// invalid byte, which can only sit inside a string, becomes \ufffd.
// Copying a validated value keeps its escapes without decoding them.
func AppendRaw(dst []byte, raw string) []byte {
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
		dst = append(dst, `\ufffd`...)
		i++
		start = i
	}
	return append(dst, raw[start:]...)
}

// AppendRawString appends tok, a raw JSON string token (quotes included,
// escapes kept), as a quoted string sanitized as AppendRawBody does;
// anything but a string token is written as "".
func AppendRawString(dst []byte, tok string) []byte {
	dst = append(dst, '"')
	if IsString(tok) {
		dst = AppendRawBody(dst, tok[1:len(tok)-1])
	}
	return append(dst, '"')
}

// AppendRawBody appends raw, the text between the quotes of a JSON string
// token as written (escapes kept), for use inside another JSON string,
// without the quotes. A validated token needs no change but for invalid
// UTF-8, which becomes \ufffd; a stray control character is escaped as
// \u00XX too.
func AppendRawBody(dst []byte, raw string) []byte {
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

// SkipSpace returns the index of the first non-space byte at or after i.
func SkipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index just past the string token starting at
// s[i] == '"'. It jumps from quote to quote; a quote after an odd number
// of backslashes is escaped.
func SkipString(s string, i int) int {
	start := i + 1
	for i = start; i < len(s); i++ {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			break
		}
		i += j
		n := 0
		for k := i - 1; k >= start && s[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return i + 1
		}
	}
	return len(s)
}

// SkipValue returns the index just past the value starting at s[i].
func SkipValue(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"':
		return SkipString(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = SkipString(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(s)
	}
	for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] > ' ' {
		i++
	}
	return i
}

// EachMember calls f with each member of the JSON object obj, in order,
// until f returns false: the key as written (quotes stripped, escapes
// kept), the raw value and the value's offset in obj. It does nothing when
// obj is not an object and stops early on invalid JSON.
func EachMember(obj string, f func(key, val string, at int) bool) {
	i := SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	for i++; ; i++ { // i is at '{' or ',' here
		i = SkipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return
		}
		end := SkipString(obj, i)
		k := obj[i+1 : max(end-1, i+1)]
		i = SkipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = SkipSpace(obj, i+1)
		end = SkipValue(obj, i)
		if end == i || !f(k, obj[i:end], i) {
			return
		}
		i = SkipSpace(obj, end)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
	}
}

// Member returns the raw value of key in the JSON object obj, or "" when
// obj is not an object or has no such member (or the JSON is invalid
// before it). Keys are compared as written: a key spelled with escapes
// does not match. The first of repeated keys wins.
func Member(obj, key string) string {
	var out string
	EachMember(obj, func(k, v string, _ int) bool {
		if k == key {
			out = v
			return false
		}
		return true
	})
	return out
}

// IsString reports whether raw is a JSON string token.
func IsString(raw string) bool { return len(raw) >= 2 && raw[0] == '"' }

// Inner returns the text between the quotes of a raw string token, still
// escaped, or "" for anything else.
func Inner(raw string) string {
	if !IsString(raw) {
		return ""
	}
	return raw[1 : len(raw)-1]
}

// EachElem calls f with the index and raw text of each element of the
// JSON array arr, until f returns false. It does nothing when arr is not
// an array and stops early on invalid JSON.
func EachElem(arr string, f func(n int, val string) bool) {
	i := SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i = SkipSpace(arr, i+1)
	for n := 0; i < len(arr) && arr[i] != ']'; n++ {
		end := SkipValue(arr, i)
		if end == i || !f(n, arr[i:end]) {
			return
		}
		i = SkipSpace(arr, end)
		if i >= len(arr) || arr[i] != ',' {
			return
		}
		i = SkipSpace(arr, i+1)
	}
}

// KeyName returns key, as written between the quotes (escapes kept),
// decoded: as it is when it has no escape (no copy), else a new string.
func KeyName(key string) string {
	if strings.IndexByte(key, '\\') < 0 {
		return key
	}
	return string(appendUnquoted(make([]byte, 0, len(key)), key))
}

// KeyIs reports whether key, as written between the quotes (escapes
// kept), is name once decoded: "mod\u0065l" is "model".
func KeyIs(key, name string) bool {
	if key == name {
		return true
	}
	if strings.IndexByte(key, '\\') < 0 || len(key) < len(name) {
		return false
	}
	var buf [64]byte
	return string(appendUnquoted(buf[:0], key)) == name
}

const hexDigits = "0123456789abcdef"
