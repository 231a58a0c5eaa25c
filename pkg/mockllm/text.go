package mockllm

import (
	"strconv"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// words is the fixed vocabulary of generated content. Word i of an answer is
// words[i%len(words)]; none of them needs JSON escaping.
var words = [...]string{
	"Tollgate", "mock", "answer", "alpha", "bravo", "charlie", "delta", "echo",
	"foxtrot", "golf", "hotel", "india", "juliett", "kilo", "lima", "mike",
	"november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform",
	"victor", "whiskey", "xray", "yankee", "zulu", "one", "two", "three",
}

// word returns generated word i.
func word(i int) string { return words[i%len(words)] }

// appendWords appends n generated words separated by single spaces: the
// same text a stream of n chunks concatenates to.
func appendWords(dst []byte, n int) []byte {
	for i := range n {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, word(i)...)
	}
	return dst
}

// appendChunkWord appends the content of stream chunk i: word i, with a
// leading space after the first chunk.
func appendChunkWord(dst []byte, i int) []byte {
	if i > 0 {
		dst = append(dst, ' ')
	}
	return append(dst, word(i)...)
}

// countWordsJSON returns the number of whitespace-separated words (as
// strings.Fields splits them) in the string a raw JSON string token, quotes
// included, decodes to. It reads the token as is, so escaped text costs no
// allocation: \t \n \r \f and \u-escaped spaces separate words.
func countWordsJSON(raw string) int {
	if len(raw) < 2 {
		return 0
	}
	s := raw[1 : len(raw)-1]
	n := 0
	inWord := false
	for i := 0; i < len(s); {
		var r rune
		size := 1
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			r, size = unescapeAt(s[i+1:])
			size++
		case c < utf8.RuneSelf:
			r = rune(c)
		default:
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		i += size
		if isSpace(r) {
			inWord = false
		} else if !inWord {
			inWord = true
			n++
		}
	}
	return n
}

// unescapeAt decodes the JSON escape whose body (after the backslash) starts
// s, returning the rune and the bytes it used. A surrogate half stands for a
// non-space character, which is all word counting needs.
func unescapeAt(s string) (rune, int) {
	switch s[0] {
	case 't':
		return '\t', 1
	case 'n':
		return '\n', 1
	case 'r':
		return '\r', 1
	case 'f':
		return '\f', 1
	case 'u':
		if len(s) >= 5 {
			if v, err := strconv.ParseUint(s[1:5], 16, 16); err == nil {
				return rune(v), 5
			}
		}
	}
	return rune(s[0]), 1
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiSpace[r]
	}
	return unicode.IsSpace(r)
}

// asciiSpace marks the ASCII bytes unicode.IsSpace reports as space.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// appendInt appends the decimal form of n.
func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// appendHex appends v as 16 lowercase hex digits.
func appendHex(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(v>>uint(shift))&0xf])
	}
	return dst
}

// b2s views b as a string without copying. The string is only valid while b
// is unchanged: request fields read through it never outlive the handler.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
