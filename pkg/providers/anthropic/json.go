package anthropic

import (
	"github.com/tollgate/tollgate/pkg/rawjson"
	"strconv"
	"unsafe"
)

// This file holds the small JSON readers the translators share: a raw
// member scanner that returns values as written, so escaped text is copied
// (with rawjson.AppendRaw, AppendRawString) rather than decoded and
// re-encoded (gjson unescapes, and allocates, for every string it
// returns).
//
// The scanners expect JSON that was validated first (providers.ValidJSON);
// on anything else they return partial results but never panic.

// isString, inner and member are rawjson's (see there).
func isString(raw string) bool      { return rawjson.IsString(raw) }
func inner(raw string) string       { return rawjson.Inner(raw) }
func member(obj, key string) string { return rawjson.Member(obj, key) }

// eachMember calls f with each key (as written) and raw value of the JSON
// object obj, in order, until f returns false: one pass where several
// member calls would each scan the object.
func eachMember(obj string, f func(key, value string) bool) {
	rawjson.EachMember(obj, func(k, v string, _ int) bool { return f(k, v) })
}

// forEachRaw calls f with the raw text of each element of the JSON array
// arr, stopping early when f returns false. It does nothing when arr is not
// an array.
func forEachRaw(arr string, f func(i int, raw string) bool) { rawjson.EachElem(arr, f) }

// appendUint appends the decimal form of n.
func appendUint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }

// stringBytes views s as bytes without copying; they must not be changed.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// bytesString views b as a string without copying; b must not change while
// the string is in use.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
