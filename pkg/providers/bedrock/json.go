package bedrock

import (
	"strconv"
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, quotes included: `"` and `\`
// are escaped, control characters below 0x20 become \n, \r, \t or \u00XX,
// valid UTF-8 passes through and each invalid byte becomes \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, s)
	return append(dst, '"')
}

// appendJSONStringBody appends s escaped for the inside of a JSON string.
func appendJSONStringBody(dst []byte, s string) []byte {
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

// appendRawJSON appends raw, a JSON value (or the inside of a JSON string)
// that has passed validation, unchanged but for invalid UTF-8 bytes: the
// validator does not check encoding, so each invalid byte, which can only
// sit inside a string, becomes \ufffd. Copying validated raw JSON keeps its
// escapes intact without decoding it.
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
		dst = append(dst, `\ufffd`...)
		i++
		start = i
	}
	return append(dst, raw[start:]...)
}

// appendStringBody appends the inside of the raw JSON string token raw
// (quotes included) for concatenation into another JSON string.
func appendStringBody(dst []byte, raw string) []byte {
	if len(raw) < 2 {
		return dst
	}
	return appendRawJSON(dst, raw[1:len(raw)-1])
}

func appendInt(dst []byte, n int64) []byte   { return strconv.AppendInt(dst, n, 10) }
func appendUint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }
func bytesString(b []byte) string            { return unsafe.String(unsafe.SliceData(b), len(b)) }

// rawMember returns the raw value of key in the JSON object obj (already
// validated), or "" when obj is not an object or lacks key. Unlike gjson
// it never decodes strings, so reading text with escapes costs no
// allocation. Keys are compared raw: a key written with escapes does not
// match.
func rawMember(obj, key string) string {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ""
	}
	for i++; ; i++ { // at '{' or ','
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return ""
		}
		end := skipValue(obj, i)
		k := obj[i+1 : max(end-1, i+1)]
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return ""
		}
		i = skipSpace(obj, i+1)
		end = skipValue(obj, i)
		if k == key {
			return obj[i:end]
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ',' {
			return ""
		}
	}
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at s[i].
func skipValue(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"':
		for i++; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return len(s)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = skipValue(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(s)
	}
	for ; i < len(s); i++ {
		switch s[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}
