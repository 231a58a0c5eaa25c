package respcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/tollgate/tollgate/pkg/rawjson"
)

// Key identifies a cached answer: the SHA-256 of the normalized request.
type Key [sha256.Size]byte

// String returns the key in hex, as stored in the bucket.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Scope is the tenant a cached answer belongs to. Answers are shared only
// within one (Dept, Team) pair, unless Shared is set (the model's
// cache.share_across_scopes), which puts every caller in one scope.
type Scope struct {
	Dept, Team string
	Shared     bool
}

// ErrNotObject is returned by NewKey for a body that is not a JSON object.
var ErrNotObject = errors.New("request body is not a JSON object")

// keyVersion changes whenever the normalization does, so old entries are
// never read with a new meaning.
const keyVersion = "tollgate-respcache-v1"

// NewKey returns the cache key of a request to endpoint (e.g.
// "/chat/completions") with the JSON body, for scope. It checks the body
// as the gateway's scan does (rawjson.Scan, at most maxDepth levels) and
// reads the answer form as the gateway does: "stream" is the literal true,
// stream_options.include_usage too.
//
// The key covers the endpoint, the scope and the body in canonical form:
// object keys sorted, insignificant whitespace dropped, strings compared by
// their decoded text (so "\u0041" equals "A"); numbers are compared as
// written ("1" and "1.0" differ). Top-level fields that cannot change the
// answer are left out: "user" (an end-user id for the provider's abuse
// monitoring). "stream" and "stream_options" are left out as written but
// replaced by the shape of the answer: non-stream, stream, or stream with
// a usage chunk (stream_options.include_usage), because a cached stream is
// replayed as it was sent and a body cannot stand in for a stream.
func NewKey(endpoint string, body []byte, scope Scope) (Key, error) {
	keys := [...]string{"stream", "stream_options"}
	var f [len(keys)]rawjson.Field
	if err := rawjson.Scan(body, maxDepth, keys[:], f[:]); err != nil {
		if errors.Is(err, rawjson.ErrNotObject) {
			return Key{}, ErrNotObject
		}
		return Key{}, fmt.Errorf("request body: %w", err)
	}
	a := NonStream
	if f[0].Raw == "true" {
		a = Stream
		rawjson.EachMember(f[1].Raw, func(k, v string, _ int) bool {
			if rawjson.KeyIs(k, "include_usage") && v == "true" {
				a = StreamWithUsage
			}
			return true
		})
	}
	return KeyOf(endpoint, body, a, scope), nil
}

// maxDepth is the deepest nesting NewKey accepts: the gateway's limit
// (providers.MaxJSONDepth), which also bounds the canonical walk's
// recursion.
const maxDepth = 128

// Answer is the form of answer a request asks for, which its key covers.
type Answer uint8

// Forms of answer.
const (
	NonStream Answer = iota
	Stream
	StreamWithUsage // stream_options.include_usage
)

// KeyOf is NewKey for a body the caller has already checked is a valid
// JSON object, within maxDepth, and whose answer form it has read (the
// gateway's one pass over a request, rawjson.Scan, issue #18): neither is
// checked or read again. The canonical form needs every byte of the body
// (each string's text goes into the hash), so KeyOf reads the body once
// more, for cached models only, with rawjson's skipping readers, which
// trust the scan and do not validate; it allocates nothing in steady state
// (its scratch space is pooled).
func KeyOf(endpoint string, body []byte, answer Answer, scope Scope) Key {
	w := writers.Get().(*writer)
	defer w.release()
	w.str(keyVersion)
	w.str(endpoint)
	if scope.Shared {
		w.tag('*')
	} else {
		w.tag('s')
		w.str(scope.Dept)
		w.str(scope.Team)
	}
	w.tag([...]byte{NonStream: 'n', Stream: 's', StreamWithUsage: 'u'}[answer])
	w.object(unsafe.String(unsafe.SliceData(body), len(body)), true)
	w.flush()
	w.sum = w.h.Sum(w.sum[:0]) // into w: a Key passed to Sum would escape
	return Key(w.sum)
}

// writer feeds the canonical form of a JSON value to a hash: a type tag,
// then lengths and contents, so no two values share an encoding. Its
// fields are scratch space reused from key to key (writers).
type writer struct {
	h   hash.Hash
	buf []byte   // bytes not yet written to h
	ms  []member // the members of the objects being written, innermost last
	txt []byte   // a decoded string
	sum []byte   // the hash's sum
}

// writers pools writers: a key costs no allocation once the pool holds
// one with room for the request's objects.
var writers = sync.Pool{New: func() any { return &writer{h: sha256.New()} }}

// maxScratch bounds the scratch space a pooled writer keeps: a writer
// that grew past it for one huge request is dropped.
const maxScratch = 1 << 20

func (w *writer) release() {
	if cap(w.txt) > maxScratch || cap(w.ms)*int(unsafe.Sizeof(member{})) > maxScratch {
		return
	}
	w.h.Reset()
	w.buf, w.ms, w.txt = w.buf[:0], w.ms[:0], w.txt[:0]
	writers.Put(w)
}

func (w *writer) tag(c byte) {
	w.buf = append(w.buf, c)
}

// str writes s with its length. Long text goes to the hash directly,
// without a copy.
func (w *writer) str(s string) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	if len(s) > 1024 {
		w.flush()
		w.h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
		return
	}
	w.buf = append(w.buf, s...)
	if len(w.buf) > 4096 {
		w.flush()
	}
}

func (w *writer) flush() {
	w.h.Write(w.buf)
	w.buf = w.buf[:0]
}

// member is one field of an object: its key decoded, its value as
// written.
type member struct {
	key, val string
}

// volatile reports whether a top-level field is left out of the key.
func volatile(key string) bool {
	return key == "user" || key == "stream" || key == "stream_options"
}

// object writes the object obj: its members sorted by key (stably: of
// repeated keys, the one written first comes first).
func (w *writer) object(obj string, top bool) {
	start := len(w.ms)
	rawjson.EachMember(obj, func(k, v string, _ int) bool {
		k = rawjson.KeyName(k)
		if !top || !volatile(k) {
			w.ms = append(w.ms, member{k, v})
		}
		return true
	})
	end := len(w.ms)
	slices.SortStableFunc(w.ms[start:end], func(a, b member) int { return strings.Compare(a.key, b.key) })
	w.tag('{')
	w.buf = binary.AppendUvarint(w.buf, uint64(end-start))
	for i := start; i < end; i++ {
		m := w.ms[i] // w.ms may move while a value is written
		w.str(m.key)
		w.value(m.val)
	}
	w.ms = w.ms[:start]
}

// value writes the JSON value v.
func (w *writer) value(v string) {
	switch v[0] {
	case '{':
		w.object(v, false)
	case '[':
		w.tag('[')
		n := 0
		rawjson.EachElem(v, func(int, string) bool { n++; return true })
		w.buf = binary.AppendUvarint(w.buf, uint64(n))
		rawjson.EachElem(v, func(_ int, x string) bool { w.value(x); return true })
	case '"':
		w.tag('"')
		in := rawjson.Inner(v)
		if strings.IndexByte(in, '\\') >= 0 {
			w.txt = rawjson.AppendUnquote(w.txt[:0], v)
			in = unsafe.String(unsafe.SliceData(w.txt), len(w.txt))
		}
		w.str(in)
	case 't':
		w.tag('t')
	case 'f':
		w.tag('f')
	case 'n':
		w.tag('z')
	default:
		w.tag('0')
		w.str(v)
	}
}
