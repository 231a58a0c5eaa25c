package bedrock

import (
	"github.com/tollgate/tollgate/pkg/rawjson"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

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
	i := rawjson.SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ""
	}
	for i++; ; i++ { // at '{' or ','
		i = rawjson.SkipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return ""
		}
		end := skipValue(obj, i)
		k := obj[i+1 : max(end-1, i+1)]
		i = rawjson.SkipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return ""
		}
		i = rawjson.SkipSpace(obj, i+1)
		end = skipValue(obj, i)
		if k == key {
			return obj[i:end]
		}
		i = rawjson.SkipSpace(obj, end)
		if i >= len(obj) || obj[i] != ',' {
			return ""
		}
	}
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
