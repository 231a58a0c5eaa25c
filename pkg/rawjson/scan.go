package rawjson

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf8"
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
	_, err := ScanFind(b, maxDepth, keys, fields, "")
	return err
}

// ScanFind is Scan that also reports whether an object at any depth has a
// member named find (compared by decoded text, as Scan compares keys), so
// that a caller who must act on such a member anywhere in the text needs
// no second pass over it. find "" finds nothing. found is meaningful only
// when err is nil.
func ScanFind(b []byte, maxDepth int, keys []string, fields []Field, find string) (found bool, err error) {
	keys = keys[:min(len(keys), MaxKeys)]
	fields = fields[:len(keys)]
	clear(fields)
	// The keys are copied in, and the fields filled in after the scan from
	// what the scanner recorded: the scanner holds no pointer to either
	// array. (Its text goes to an assembly routine in the vector build,
	// which the compiler takes to keep what it is given; through the
	// scanner, the callers' arrays would move to the heap.)
	var s scanner
	s.b, s.max, s.nkeys, s.find = b, maxDepth, len(keys), find
	copy(s.keys[:], keys)
	i := skipSpace(b, 0)
	obj := i < len(b) && b[i] == '{'
	i = s.value(i, true)
	if i >= 0 {
		if i = skipSpace(b, i); i != len(b) {
			s.fail(errSyntax, i)
		}
	}
	if haveSIMD && s.err == errNone {
		// The strings' UTF-8, checked over the text not yet checked: a
		// valid text is ASCII outside its strings.
		s.checkUTF8(len(b))
	}
	for k := range fields {
		if s.ends[k] > 0 {
			fields[k] = Field{Raw: unsafe.String(&b[s.idx[k]], s.ends[k]-s.idx[k]), Idx: s.idx[k], Repeat: s.rep[k]}
		}
	}
	switch {
	case s.err == errSyntax && !Shallow(b, maxDepth):
		// Depth first, wherever it is: a deep body is refused as deep even
		// when it is also broken before the depth is reached.
		return false, &Error{Err: ErrDepth}
	case s.err != 0:
		return false, &Error{Err: sentinels[s.err], Offset: s.at}
	case s.notUTF8:
		return false, &Error{Err: ErrUTF8, Offset: firstNotUTF8(b)}
	case !obj:
		return false, &Error{Err: ErrNotObject}
	}
	return s.found, nil
}

// MaxKeys is the most keys one Scan looks for.
const MaxKeys = 16

// Valid reports whether b is a JSON text encoding/json's Valid accepts
// that nests at most maxDepth deep. Like encoding/json it accepts strings
// holding bytes that are not UTF-8.
func Valid(b []byte, maxDepth int) bool {
	s := scanner{b: b, max: maxDepth}
	i := s.value(skipSpace(b, 0), false)
	return i >= 0 && skipSpace(b, i) == len(b)
}

// Shallow reports whether b nests arrays and objects at most maxDepth deep. It
// tracks strings so brackets inside them do not count; it validates
// nothing else.
func Shallow(b []byte, maxDepth int) bool {
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
			if depth > maxDepth {
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
	b     []byte
	depth int
	max   int
	// notUTF8 is set when a string holds a byte sequence that is not
	// UTF-8 (Scan then finds the offset of the first).
	notUTF8 bool
	// utf8To is how far the vector reader's build has checked the
	// text's UTF-8 (checkUTF8).
	utf8To int
	esc    bool
	err    errKind
	at     int
	// The keys Scan looks for, and per key the offsets of its value's
	// start (idx) and end (ends; 0 while not found) and of its second
	// appearance's value (rep).
	nkeys int
	keys  [MaxKeys]string
	idx   [MaxKeys]int
	ends  [MaxKeys]int
	rep   [MaxKeys]int
	// find is the key ScanFind looks for at every depth; found is set
	// when an object has it.
	find  string
	found bool
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
		if top && s.nkeys > 0 {
			s.member(b[ks+1:ke-1], esc, vs, i)
		}
		if s.find != "" && !s.found {
			s.look(b[ks+1:ke-1], esc)
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
		key = appendUnquoted(buf[:0], unsafe.String(unsafe.SliceData(key), len(key)))
	}
	for k := range s.nkeys {
		if string(key) != s.keys[k] {
			continue
		}
		switch {
		case s.ends[k] == 0:
			s.idx[k], s.ends[k] = vs, ve
		case s.rep[k] == 0:
			s.rep[k] = vs
		}
		return
	}
}

// look sets found when key (between the quotes, as written) is s.find.
// An escaped key is decoded only when it can be the key: its decoded text
// is at most as long as the written one.
func (s *scanner) look(key []byte, esc bool) {
	switch {
	case !esc:
		s.found = string(key) == s.find
	case len(key) >= len(s.find):
		var buf [64]byte
		s.found = string(appendUnquoted(buf[:0], unsafe.String(unsafe.SliceData(key), len(key)))) == s.find
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

// blockLen is the vector string reader's block size (scan_simd.go): two
// 32-byte vectors, one bit per byte in a uint64 mask.
const blockLen = 64

// SWAR constants: one bit or value per byte of a uint64.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// str reads the string starting at b[i] == '"'. It checks escapes, refuses
// control characters and notes (in s.notUTF8) a byte sequence that is not
// UTF-8; it sets s.esc when the string has an escape.
//
// The strings of a chat history are nearly all of a request body (issue
// #18), so they are read eight bytes at a time: a word of plain ASCII costs
// a few ALU operations and one well-predicted branch. Non-ASCII text goes
// to utf8Run, which checks it a word at a time without a branch per byte
// or per character.
//
// Where the vector instructions are there (haveSIMD: built with
// GOEXPERIMENT=simd, on an AVX2 machine), long strings are read 64 bytes
// at a time by blocks instead (blocks512, one 64-byte vector a block, on a
// machine with AVX-512), and the text's UTF-8 is checked by
// checkUTF8 a window at a time: after the string that ends a window, and
// at the end of Scan; both readers accept and refuse the same texts, at
// the same offsets.
func (s *scanner) str(i int) int {
	i++
	if !haveSIMD {
		i, _ = s.strRun(i, len(s.b)+1)
		return i
	}
	for {
		// Whole blocks of the string with vector instructions; what they
		// hand back (an escape they cannot check, a control byte, the
		// last bytes of the text) the word-at-a-time reader takes until
		// past that block.
		var done bool
		if have512 {
			i, done = s.blocks512(i)
		} else {
			i, done = s.blocks(i)
		}
		if done {
			if i-s.utf8To >= utf8Window {
				s.checkUTF8(i)
			}
			return i
		}
		if i, done = s.strRun(i, i+blockLen+8); done {
			return i
		}
	}
}

// utf8Window is how much text the vector reader's build reads before it
// checks that text's UTF-8: little enough that the text is still in the
// processor's first caches, where a check over the whole of a large body
// after the scan would read it again from memory. A variable so that the
// tests can check windows of any size.
var utf8Window = 16 << 10

// checkUTF8 checks the UTF-8 of the text from s.utf8To to to, which ends
// with an ASCII byte (a string's closing quote, or the end of the text),
// so that no character is cut in two.
func (s *scanner) checkUTF8(to int) {
	if !s.notUTF8 && !validUTF8(s.b[s.utf8To:to]) {
		s.notUTF8 = true
	}
	s.utf8To = to
}

// strRun reads a string from b[i], a byte inside it that does not continue
// an escape sequence. It returns the index past the closing quote (or -1
// after a failure) and true, or, once at or past limit, the index of the
// next byte to read (again not within an escape sequence) and false.
func (s *scanner) strRun(i, limit int) (int, bool) {
	b := s.b
	for {
		if i >= limit {
			return i, false
		}
		var x, m uint64
		w := b[i:]
		for ; len(w) >= 8; w = w[8:] {
			x = binary.LittleEndian.Uint64(w)
			if m = special(x); m != 0 {
				break
			}
		}
		i = len(b) - len(w)
		if m == 0 {
			// The last bytes: past the end the text reads as zero bytes,
			// control bytes, so m is not 0.
			x = loadTail(b, i)
			m = special(x)
		}
		// The special bytes of the word x at i, lowest first, while they
		// are two-byte escapes within the word.
		for {
			p := bits.TrailingZeros64(m) >> 3
			j := i + p
			if j >= len(b) {
				return s.fail(errSyntax, len(b)), true
			}
			switch c := byte(x >> (8 * p)); {
			case c == '\\':
				s.esc = true
				if p < 7 && simpleEscape[byte(x>>(8*p+8))] {
					if m = exact(x) & (^uint64(0) << (8*p + 16)); m != 0 {
						continue
					}
					i += 8
				} else if j+6 <= len(b) && b[j+1] == 'u' && allHex(b[j+2:j+6]) {
					i = j + 6 // \uXXXX, as pasted code's <, > and & are sent
				} else if i = s.escape(j); i < 0 {
					return -1, true
				}
			case c == '"':
				return j + 1, true
			case c >= utf8.RuneSelf && haveSIMD:
				// Scan checks the whole text's UTF-8 at the end.
				i = plainRun(b, j)
			case c >= utf8.RuneSelf:
				i = s.utf8Run(j)
			default: // a control byte
				return s.fail(errSyntax, j), true
			}
			break
		}
	}
}

// special flags (in the high bit of its byte) each byte of the word x that
// str cannot skip: '"', '\\', a control byte (below 0x20) or a byte that is
// not ASCII. Only the lowest flag is sure to be right: a borrow from a
// flagged byte may flag the byte above it too (exact gives exact flags).
func special(x uint64) uint64 {
	q, bs := x^(ones*'"'), x^(ones*'\\')
	m := ((x - ones*0x20) | (q - ones) | (bs - ones)) &^ x
	return (m | x) & highs
}

// exact flags the bytes special flags, each flag exact: no sum carries
// from one byte into the next, so str can clear the bytes it has read and
// take the next flag of the same word. It costs a few operations more.
func exact(x uint64) uint64 { return (x | stops(x)) & highs }

// stops flags (in the high bit of its byte) each ASCII byte of the word x
// that is '"', '\\' or a control byte, exactly.
func stops(x uint64) uint64 {
	low := x &^ highs                       // each byte's low 7 bits
	ctl := low + ones*(0x80-0x20)           // high bit clear: below 0x20
	quote := (low ^ ones*'"') + ones*0x7F   // clear: '"'
	bslash := (low ^ ones*'\\') + ones*0x7F // clear: '\\'
	return ^(ctl & quote & bslash) &^ x & highs
}

// utf8Run checks the text of a string from b[i], a byte that is not ASCII,
// up to a quote, backslash or control byte, or up to the end of a word of
// plain ASCII: it returns the index there. The text goes through the UTF-8
// automaton (utf8DFA) eight bytes at a time, its state carried from word
// to word, so text mixing ASCII, accents, CJK and emoji costs no branch
// per character. A sequence cut short by a special byte (or the end of the
// text) ends in a state other than accept, as the bytes from the special
// one on read as zero bytes.
//
// A word without a stop byte, the common case in runs of accents, CJK or
// emoji, feeds the automaton its bytes from memory: the loads go to the
// load ports and leave the ALUs to the automaton's chain of shifts, where
// taking each byte out of the word costs two ALU operations (CJK text +25%,
// accented +15%, mixed chat histories +5-10% on the bench machine).
func (s *scanner) utf8Run(i int) int {
	b := s.b
	st := uint64(dfaAccept)
	t := &utf8DFA
	for {
		x := loadWord(b, i)
		m := stops(x)
		if m|x&highs == 0 && st == dfaAccept {
			return i + 8
		}
		if m == 0 {
			// A whole word of text, its bytes read from memory (above).
			w := (*[8]byte)(b[i : i+8])
			st = t[w[0]] >> (st & 63)
			st = t[w[1]] >> (st & 63)
			st = t[w[2]] >> (st & 63)
			st = t[w[3]] >> (st & 63)
			st = t[w[4]] >> (st & 63)
			st = t[w[5]] >> (st & 63)
			st = t[w[6]] >> (st & 63)
			st = t[w[7]] >> (st & 63)
			st &= 63
			i += 8
			continue
		}
		n := bits.TrailingZeros64(m) >> 3
		x &= 1<<(8*n) - 1
		st = t[byte(x)] >> (st & 63)
		st = t[byte(x>>8)] >> (st & 63)
		st = t[byte(x>>16)] >> (st & 63)
		st = t[byte(x>>24)] >> (st & 63)
		st = t[byte(x>>32)] >> (st & 63)
		st = t[byte(x>>40)] >> (st & 63)
		st = t[byte(x>>48)] >> (st & 63)
		st = t[byte(x>>56)] >> (st & 63)
		if st&63 != dfaAccept {
			s.notUTF8 = true
		}
		return i + n
	}
}

// plainRun returns the index of the first quote, backslash or control
// byte of b at or after i (or of the word past the end of the text): the
// bytes the string reader skips without reading them, when the text's
// UTF-8 is checked apart.
func plainRun(b []byte, i int) int {
	for {
		if m := stops(loadWord(b, i)); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
}

// loadWord returns the eight bytes of b from i on as a little-endian
// word, zero bytes standing in for those past the end.
func loadWord(b []byte, i int) uint64 {
	if i+8 <= len(b) {
		return binary.LittleEndian.Uint64(b[i:])
	}
	return loadTail(b, i)
}

// loadTail returns the bytes of b from i on (fewer than eight) as a
// little-endian word, zero bytes standing in for those past the end.
func loadTail(b []byte, i int) uint64 {
	var w [8]byte
	if i < len(b) {
		copy(w[:], b[i:])
	}
	return binary.LittleEndian.Uint64(w[:])
}

// hexDigit is 1 for the hexadecimal digits, 0 for other bytes.
var hexDigit = func() (t [256]uint8) {
	for _, c := range "0123456789abcdefABCDEF" {
		t[c] = 1
	}
	return t
}()

// allHex reports whether the four bytes of h are hexadecimal digits (a
// table lookup each, no branch; hex4 decodes them).
func allHex(h []byte) bool {
	return hexDigit[h[0]]&hexDigit[h[1]]&hexDigit[h[2]]&hexDigit[h[3]] != 0
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

// The UTF-8 automaton: a shift DFA. A state is a bit offset (a multiple of
// 6); utf8DFA[c] holds, at each state's offset, the offset of the state
// that byte c leads to, so a step is one lookup and one shift:
// st = utf8DFA[c] >> (st & 63). It accepts exactly what utf8.Valid
// accepts: no overlong forms, no surrogates, nothing above U+10FFFF. The
// error state is offset 0, which every byte leads back to.
const (
	dfaError  = 0 * 6
	dfaAccept = 1 * 6
	dfaNeed1  = 2 * 6 // one continuation byte (80-BF) to go
	dfaNeed2  = 3 * 6
	dfaNeed3  = 4 * 6
	dfaE0     = 5 * 6 // after E0: A0-BF, then one more
	dfaED     = 6 * 6 // after ED: 80-9F (no surrogates), then one more
	dfaF0     = 7 * 6 // after F0: 90-BF, then two more
	dfaF4     = 8 * 6 // after F4: 80-8F (at most U+10FFFF), then two more
)

var utf8DFA = func() (t [256]uint64) {
	set := func(from uint64, lo, hi int, to uint64) {
		for c := lo; c <= hi; c++ {
			t[c] |= to << from
		}
	}
	set(dfaAccept, 0x00, 0x7F, dfaAccept)
	set(dfaAccept, 0xC2, 0xDF, dfaNeed1)
	set(dfaAccept, 0xE0, 0xE0, dfaE0)
	set(dfaAccept, 0xE1, 0xEC, dfaNeed2)
	set(dfaAccept, 0xED, 0xED, dfaED)
	set(dfaAccept, 0xEE, 0xEF, dfaNeed2)
	set(dfaAccept, 0xF0, 0xF0, dfaF0)
	set(dfaAccept, 0xF1, 0xF3, dfaNeed3)
	set(dfaAccept, 0xF4, 0xF4, dfaF4)
	set(dfaNeed1, 0x80, 0xBF, dfaAccept)
	set(dfaNeed2, 0x80, 0xBF, dfaNeed1)
	set(dfaNeed3, 0x80, 0xBF, dfaNeed2)
	set(dfaE0, 0xA0, 0xBF, dfaNeed1)
	set(dfaED, 0x80, 0x9F, dfaNeed1)
	set(dfaF0, 0x90, 0xBF, dfaNeed2)
	set(dfaF4, 0x80, 0x8F, dfaNeed2)
	return t
}()

// firstNotUTF8 is the offset of the first byte of b that does not start a
// valid UTF-8 sequence, len(b) when b is UTF-8. Scan reports it for a text
// whose strings were found not to be UTF-8: outside strings a valid text is
// ASCII, so the first such byte is in a string.
func firstNotUTF8(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace. Most bodies have none or single spaces, which cost one
// compare; indented ones skip their indentation eight spaces at a time.
func skipSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' {
		if c := b[i]; c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			break
		}
		i++
		for i+8 <= len(b) && binary.LittleEndian.Uint64(b[i:]) == ones*' ' {
			i += 8
		}
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
