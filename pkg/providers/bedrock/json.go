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

// rawMember is rawjson.Member: the raw value of key in obj, never decoded,
// so reading text with escapes costs no allocation.
func rawMember(obj, key string) string { return rawjson.Member(obj, key) }
