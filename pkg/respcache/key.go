package respcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
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
// "/chat/completions") with the JSON body, for scope.
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
	if !gjson.ValidBytes(body) {
		return Key{}, errors.New("request body is not valid JSON")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return Key{}, ErrNotObject
	}
	a := NonStream
	switch {
	case !root.Get("stream").Bool():
	case root.Get("stream_options.include_usage").Bool():
		a = StreamWithUsage
	default:
		a = Stream
	}
	return keyOf(endpoint, root, a, scope), nil
}

// Answer is the form of answer a request asks for, which its key covers.
type Answer uint8

// Forms of answer.
const (
	NonStream Answer = iota
	Stream
	StreamWithUsage // stream_options.include_usage
)

// KeyOf is NewKey for a body the caller has already checked is a valid
// JSON object and whose answer form it has read (the gateway's one pass
// over a request, issue #18): neither is checked or read again, so the
// body is walked once, for its canonical form.
func KeyOf(endpoint string, body []byte, answer Answer, scope Scope) Key {
	return keyOf(endpoint, gjson.ParseBytes(body), answer, scope)
}

func keyOf(endpoint string, root gjson.Result, answer Answer, scope Scope) Key {
	w := writer{h: sha256.New()}
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
	w.object(root, true)
	var k Key
	w.flush()
	w.h.Sum(k[:0])
	return k
}

// writer feeds the canonical form of a JSON value to a hash: a type tag,
// then lengths and contents, so no two values share an encoding.
type writer struct {
	h   hash.Hash
	buf []byte
}

func (w *writer) tag(c byte) {
	w.buf = append(w.buf, c)
}

func (w *writer) str(s string) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	w.buf = append(w.buf, s...)
	if len(w.buf) > 4096 {
		w.flush()
	}
}

func (w *writer) flush() {
	w.h.Write(w.buf)
	w.buf = w.buf[:0]
}

// member is one field of an object.
type member struct {
	key string
	val gjson.Result
}

// volatile reports whether a top-level field is left out of the key.
func volatile(key string) bool {
	return key == "user" || key == "stream" || key == "stream_options"
}

func (w *writer) object(v gjson.Result, top bool) {
	var ms []member
	v.ForEach(func(k, val gjson.Result) bool {
		if !top || !volatile(k.Str) {
			ms = append(ms, member{k.Str, val})
		}
		return true
	})
	slices.SortStableFunc(ms, func(a, b member) int { return strings.Compare(a.key, b.key) })
	w.tag('{')
	w.buf = binary.AppendUvarint(w.buf, uint64(len(ms)))
	for _, m := range ms {
		w.str(m.key)
		w.value(m.val)
	}
}

func (w *writer) value(v gjson.Result) {
	switch {
	case v.IsObject():
		w.object(v, false)
	case v.IsArray():
		w.tag('[')
		n := 0
		v.ForEach(func(_, x gjson.Result) bool { n++; return true })
		w.buf = binary.AppendUvarint(w.buf, uint64(n))
		v.ForEach(func(_, x gjson.Result) bool { w.value(x); return true })
	case v.Type == gjson.String:
		w.tag('"')
		w.str(v.Str)
	case v.Type == gjson.Number:
		w.tag('0')
		w.str(v.Raw)
	case v.Type == gjson.True:
		w.tag('t')
	case v.Type == gjson.False:
		w.tag('f')
	default:
		w.tag('z')
	}
}
