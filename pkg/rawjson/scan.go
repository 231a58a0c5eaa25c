package rawjson

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"
)

// Errors of Scan and Valid, wrapped in an *Error with the byte offset.
var (
	// ErrSyntax: the text is not JSON (what encoding/json's Valid refuses).
	ErrSyntax = errors.New("not valid JSON")
	// ErrDepth: arrays and objects nest deeper than the limit.
	ErrDepth = errors.New("nests too deep")
	// ErrUTF8: the text is valid JSON but not UTF-8 (a string holds a byte
	// sequence that is not UTF-8; encoding/json accepts those).
	ErrUTF8 = errors.New("not valid UTF-8")
	// ErrNotObject: the text is valid JSON but not an object.
	ErrNotObject = errors.New("not a JSON object")
)

// Error is a Scan failure: Err is one of the sentinels above, Offset the
// byte offset it was found at (for ErrUTF8 the first byte that is not
// UTF-8; for ErrDepth the bracket past the limit, or 0 when the text was
// refused for its depth after a syntax error).
type Error struct {
	Err    error
	Offset int
}

// Error names the failure and its offset.
func (e *Error) Error() string { return fmt.Sprintf("%v at byte %d", e.Err, e.Offset) }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// Field is a top-level member Scan looked for: its value as written and the
// value's byte offset. Raw is "" when the object has no such member.
type Field struct {
	Raw string
	Idx int
	// Repeat is the offset of the value of the key's second appearance; 0
	// when the key appears at most once.
	Repeat int
}

// Scan checks, in one pass, that b is one JSON text that encoding/json's
// Valid accepts, nesting arrays and objects at most maxDepth deep, that is
// UTF-8 and whose value is an object; and it fills fields[i] for each
// top-level member named keys[i]. A failure is an *Error; the precedence
// of failures does not depend on where in b they are: depth, then syntax,
// then UTF-8, then not an object.
//
// Keys are compared by their decoded text, as JSON parsers read them:
// "mod\u0065l" is the key "model" (a reader that compared keys as written
// would see a different member than the upstream does). fields must be at
// least as long as keys, and keys at most MaxKeys long. Scan allocates
// nothing unless it fails or a key is escaped and longer than 64 bytes.
// Each nesting level recurses once, so maxDepth bounds the stack.
func Scan(b []byte, maxDepth int, keys []string, fields []Field) error {
	keys = keys[:min(len(keys), MaxKeys)]
	fields = fields[:len(keys)]
	clear(fields)
	s := scanner{b: b, max: maxDepth, bad: -1, keys: keys, fields: fields}
	i := skipSpace(b, 0)
	obj := i < len(b) && b[i] == '{'
	i = s.value(i, true)
	if i >= 0 {
		if i = skipSpace(b, i); i != len(b) {
			s.fail(errSyntax, i)
		}
	}
	for k := range fields {
		// Set here, not while scanning: a pointer stored through the
		// recursive scanner would move fields to the heap.
		if f := &fields[k]; s.ends[k] > 0 {
			f.Raw = unsafe.String(&b[f.Idx], s.ends[k]-f.Idx)
		}
	}
	switch {
	case s.err == errSyntax && !Shallow(b, maxDepth):
		// Depth first, wherever it is: a deep body is refused as deep even
		// when it is also broken before the depth is reached.
		return &Error{Err: ErrDepth}
	case s.err != 0:
		return &Error{Err: sentinels[s.err], Offset: s.at}
	case s.bad >= 0:
		return &Error{Err: ErrUTF8, Offset: s.bad}
	case !obj:
		return &Error{Err: ErrNotObject}
	}
	return nil
}

// MaxKeys is the most keys one Scan looks for.
const MaxKeys = 16

// Valid reports whether b is a JSON text encoding/json's Valid accepts
// that nests at most maxDepth deep. Like encoding/json it accepts strings
// holding bytes that are not UTF-8.
func Valid(b []byte, maxDepth int) bool {
	s := scanner{b: b, max: maxDepth, bad: -1}
	i := s.value(skipSpace(b, 0), false)
	return i >= 0 && skipSpace(b, i) == len(b)
}

// Shallow reports whether b nests arrays and objects at most max deep. It
// tracks strings so brackets inside them do not count; it validates
// nothing else.
func Shallow(b []byte, max int) bool {
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			if depth > max {
				return false
			}
		case ']', '}':
			depth--
		}
	}
	return true
}

// scanner is one Scan or Valid. Its methods return the index just past
// what they read, or -1 after recording the failure in err and at.
type scanner struct {
	b      []byte
	depth  int
	max    int
	bad    int // offset of the first byte that is not UTF-8, -1 if none
	esc    bool
	err    errKind
	at     int
	keys   []string
	fields []Field // Idx and Repeat, set while scanning
	ends   [MaxKeys]int
}

// errKind is a failure while scanning: an index into sentinels.
type errKind uint8

const (
	errNone errKind = iota
	errSyntax
	errDepth
)

var sentinels = [...]error{errSyntax: ErrSyntax, errDepth: ErrDepth}

func (s *scanner) fail(err errKind, at int) int {
	s.err, s.at = err, at
	return -1
}

func (s *scanner) value(i int, top bool) int {
	b := s.b
	if i >= len(b) {
		return s.fail(errSyntax, i)
	}
	switch c := b[i]; c {
	case '"':
		return s.str(i)
	case '{':
		return s.object(i, top)
	case '[':
		return s.array(i)
	case 't':
		return s.literal(i, "true")
	case 'f':
		return s.literal(i, "false")
	case 'n':
		return s.literal(i, "null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return s.number(i)
		}
		return s.fail(errSyntax, i)
	}
}

func (s *scanner) literal(i int, lit string) int {
	if len(s.b)-i < len(lit) || string(s.b[i:i+len(lit)]) != lit {
		return s.fail(errSyntax, i)
	}
	return i + len(lit)
}

func (s *scanner) object(i int, top bool) int {
	b := s.b
	if s.depth++; s.depth > s.max {
		return s.fail(errDepth, i)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		s.depth--
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return s.fail(errSyntax, i)
		}
		ks := i
		s.esc = false
		if i = s.str(i); i < 0 {
			return -1
		}
		ke, esc := i, s.esc
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return s.fail(errSyntax, i)
		}
		vs := skipSpace(b, i+1)
		if i = s.value(vs, false); i < 0 {
			return -1
		}
		if top && len(s.keys) > 0 {
			s.member(b[ks+1:ke-1], esc, vs, i)
		}
		if i = skipSpace(b, i); i >= len(b) {
			return s.fail(errSyntax, i)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			s.depth--
			return i + 1
		default:
			return s.fail(errSyntax, i)
		}
	}
}

// member records a top-level member whose key (between the quotes, as
// written) is one of s.keys.
func (s *scanner) member(key []byte, esc bool, vs, ve int) {
	var buf [64]byte
	if esc {
		key = appendUnquoted(buf[:0], key)
	}
	for k, want := range s.keys {
		if string(key) != want {
			continue
		}
		f := &s.fields[k]
		switch {
		case s.ends[k] == 0:
			f.Idx, s.ends[k] = vs, ve
		case f.Repeat == 0:
			f.Repeat = vs
		}
		return
	}
}

func (s *scanner) array(i int) int {
	b := s.b
	if s.depth++; s.depth > s.max {
		return s.fail(errDepth, i)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		s.depth--
		return i + 1
	}
	for {
		if i = s.value(i, false); i < 0 {
			return -1
		}
		if i = skipSpace(b, i); i >= len(b) {
			return s.fail(errSyntax, i)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			s.depth--
			return i + 1
		default:
			return s.fail(errSyntax, i)
		}
	}
}

func (s *scanner) number(i int) int {
	b := s.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return s.fail(errSyntax, i)
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return s.fail(errSyntax, i)
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || b[i] < '0' || b[i] > '9' {
			return s.fail(errSyntax, i)
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return s.fail(errSyntax, i)
		}
		i = digits(b, i+1)
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// SWAR constants: one bit or value per byte of a uint64.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// str reads the string starting at b[i] == '"'. It checks escapes, refuses
// control characters and notes the first byte that is not UTF-8; it sets
// s.esc when the string has an escape. Runs of plain ASCII are skipped
// eight bytes at a time.
func (s *scanner) str(i int) int {
	b := s.b
	i++
	for {
		for ; i+8 <= len(b); i += 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			// A byte is special when it is below 0x20, a quote, a
			// backslash or not ASCII. The lowest flagged byte is always a
			// special one (borrows only flag bytes above it).
			q, bs := x^(ones*'"'), x^(ones*'\\')
			m := ((x - ones*0x20) | (q - ones) | (bs - ones)) &^ x
			m = (m | x) & highs
			if m == 0 {
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
			break
		}
		if i >= len(b) {
			return s.fail(errSyntax, i)
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			s.esc = true
			if i+1 < len(b) && simpleEscape[b[i+1]] {
				i += 2
			} else if i = s.escape(i); i < 0 {
				return -1
			}
		case c < 0x20:
			return s.fail(errSyntax, i)
		case c < 0x80:
			i++
		default:
			// Runs of non-ASCII text (CJK, Cyrillic) stay here.
			for i = s.utf8(i); i < len(b) && b[i] >= 0x80; {
				i = s.utf8(i)
			}
		}
	}
}

// simpleEscape marks the bytes that end a two-byte escape sequence.
var simpleEscape = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}

// escape reads the escape sequence at b[i] == '\\'.
func (s *scanner) escape(i int) int {
	b := s.b
	if i+1 >= len(b) {
		return s.fail(errSyntax, i+1)
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2
	case 'u':
		if len(b)-i < 6 {
			return s.fail(errSyntax, len(b))
		}
		for j := i + 2; j < i+6; j++ {
			if unhex(b[j]) < 0 {
				return s.fail(errSyntax, j)
			}
		}
		return i + 6
	}
	return s.fail(errSyntax, i+1)
}

// utf8 checks the sequence starting at the non-ASCII byte b[i] inside a
// string and returns the index past it; a byte that does not start a
// valid sequence is noted (the first one) and skipped.
func (s *scanner) utf8(i int) int {
	b := s.b
	c := b[i]
	n, lo, hi := 0, byte(0x80), byte(0xBF)
	switch {
	case c < 0xC2:
	case c < 0xE0:
		n = 2
	case c < 0xF0:
		n = 3
		if c == 0xE0 {
			lo = 0xA0
		} else if c == 0xED {
			hi = 0x9F
		}
	case c < 0xF5:
		n = 4
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F
		}
	}
	if n > 0 && i+n <= len(b) && b[i+1] >= lo && b[i+1] <= hi &&
		(n < 3 || b[i+2]&0xC0 == 0x80) && (n < 4 || b[i+3]&0xC0 == 0x80) {
		return i + n
	}
	if s.bad < 0 {
		s.bad = i
	}
	return i + 1
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
