package mockllm

import "github.com/tollgate/tollgate/pkg/rawjson"

// gjson unescapes every string value it returns, which allocates for text
// with escapes (most prompts contain \n). Word counting only needs the raw
// tokens, so these helpers walk a body gjson.ValidBytes already accepted and
// return raw values without decoding them. On invalid JSON they return
// partial results, never panic.

// member returns the raw value of key in the JSON object obj, or "" when
// obj is not an object or has no such member. Keys are compared raw, so a
// key written with escapes does not match.
func member(obj, key string) string {
	i := rawjson.SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ""
	}
	for i++; ; i++ { // i is at '{' or ',' here
		i = rawjson.SkipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return ""
		}
		end := rawjson.SkipString(obj, i)
		k := obj[i+1 : max(end-1, i+1)]
		i = rawjson.SkipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return ""
		}
		i = rawjson.SkipSpace(obj, i+1)
		end = rawjson.SkipValue(obj, i)
		if k == key {
			return obj[i:end]
		}
		i = rawjson.SkipSpace(obj, end)
		if i >= len(obj) || obj[i] != ',' {
			return ""
		}
	}
}

// forEachRaw calls f with the raw text of each element of the JSON array
// arr. It does nothing when arr is not an array.
func forEachRaw(arr string, f func(raw string)) {
	i := rawjson.SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i = rawjson.SkipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return
	}
	for i < len(arr) {
		end := rawjson.SkipValue(arr, i)
		if end == i {
			return
		}
		f(arr[i:end])
		i = rawjson.SkipSpace(arr, end)
		if i >= len(arr) || arr[i] != ',' {
			return
		}
		i = rawjson.SkipSpace(arr, i+1)
	}
}
