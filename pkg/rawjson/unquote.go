package rawjson

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Unquote returns the text of a JSON string token raw (quotes included)
// that Scan or Valid accepted: raw without its quotes when it has no
// escape (no copy), else decoded. A lone surrogate escape ("\ud800")
// becomes U+FFFD, as encoding/json decodes it. It returns "" for anything
// but a string token.
func Unquote(raw string) string {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return ""
	}
	in := raw[1 : len(raw)-1]
	if strings.IndexByte(in, '\\') < 0 {
		return in
	}
	return string(appendUnquoted(make([]byte, 0, len(in)), in))
}

// AppendUnquote appends the text of a JSON string token raw (quotes
// included) that Scan or Valid accepted to dst, decoded as Unquote decodes
// it, and returns the extended buffer. It appends nothing for anything but
// a string token.
func AppendUnquote(dst []byte, raw string) []byte {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return dst
	}
	return appendUnquoted(dst, raw[1:len(raw)-1])
}

// appendUnquoted appends the decoded text of the inside of a valid JSON
// string (escapes kept as written) to dst. The text between escapes is
// copied a run at a time.
func appendUnquoted(dst []byte, in string) []byte {
	for {
		j := strings.IndexByte(in, '\\')
		if j < 0 || j+1 >= len(in) {
			return append(dst, in...)
		}
		dst = append(dst, in[:j]...)
		n := 2
		switch c := in[j+1]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			var r rune
			r, n = unicodeEscape(in, j)
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
		in = in[j+n:]
	}
}

// unicodeEscape decodes the \uXXXX escape at in[i] (and a low surrogate
// escape after a high one), returning the rune and the bytes read.
func unicodeEscape(in string, i int) (rune, int) {
	r := hex4(in, i+2)
	if r < 0 {
		return utf8.RuneError, 2
	}
	if r < 0xD800 || r >= 0xE000 {
		return rune(r), 6
	}
	if r < 0xDC00 && i+12 <= len(in) && in[i+6] == '\\' && in[i+7] == 'u' {
		if lo := hex4(in, i+8); lo >= 0xDC00 && lo < 0xE000 {
			return rune((r-0xD800)<<10|(lo-0xDC00)) + 0x10000, 12
		}
	}
	return utf8.RuneError, 6
}

func hex4(in string, i int) int {
	if i+4 > len(in) {
		return -1
	}
	n := 0
	for j := i; j < i+4; j++ {
		d := unhex(in[j])
		if d < 0 {
			return -1
		}
		n = n<<4 | d
	}
	return n
}

// Int returns the integer value of a JSON number token as written,
// truncated toward zero; a number beyond ±2^53 that is written as an
// integer is read exactly. It returns 0 for anything but a number.
func Int(raw string) int64 {
	if n := len(raw); n > 0 && n <= 15 {
		var v int64
		i := 0
		if raw[0] == '-' {
			i = 1
		}
		for ; i < n && raw[i] >= '0' && raw[i] <= '9'; i++ {
			v = v*10 + int64(raw[i]-'0')
		}
		if i == n && n > 0 && raw[n-1] != '-' {
			if raw[0] == '-' {
				return -v
			}
			return v
		}
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil && f == 0 {
		return 0
	}
	const maxSafe = 1<<53 - 1
	if f >= -maxSafe && f <= maxSafe {
		return int64(f)
	}
	if v, err := strconv.ParseInt(raw, 10, 64); err == nil {
		return v
	}
	return int64(f)
}
