package gemini

import "github.com/tollgate/tollgate/pkg/rawjson"

// gjson unescapes every string value it returns, which allocates for text
// with escapes (most model output contains \n or \"). The stream path only
// copies raw tokens, so these helpers walk JSON that providers.ValidJSON
// has already accepted and hand out raw values without decoding them. On
// invalid JSON they stop early; they never panic.

// forEachMember calls f with the raw key (quotes stripped, escapes kept)
// and raw value of each member of the JSON object obj, until f returns
// false. It does nothing when obj is not an object.
func forEachMember(obj string, f func(key, val string) bool) {
	rawjson.EachMember(obj, func(k, v string, _ int) bool { return f(k, v) })
}

// forEachElem calls f with the raw text of each element of the JSON array
// arr, until f returns false. It does nothing when arr is not an array.
func forEachElem(arr string, f func(val string) bool) {
	rawjson.EachElem(arr, func(_ int, v string) bool { return f(v) })
}

// firstElem returns the raw first element of a JSON array, or "".
func firstElem(arr string) string {
	var first string
	forEachElem(arr, func(v string) bool {
		first = v
		return false
	})
	return first
}

// member, isString and inner are rawjson's (see there).
func member(obj, key string) string { return rawjson.Member(obj, key) }
func isString(raw string) bool      { return rawjson.IsString(raw) }
func inner(raw string) string       { return rawjson.Inner(raw) }
