package mockllm

// gjson unescapes every string value it returns, which allocates for text
// with escapes (most prompts contain \n). Word counting only needs the raw
// tokens, so these helpers walk a body gjson.ValidBytes already accepted and
// return raw values without decoding them. On invalid JSON they return
// partial results, never panic.

// member returns the raw value of key in the JSON object obj, or "" when
// obj is not an object or has no such member. Keys are compared raw, so a
// key written with escapes does not match.
func member(obj, key string) string {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ""
	}
	for i++; ; i++ { // i is at '{' or ',' here
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return ""
		}
		end := skipString(obj, i)
		k := obj[i+1 : max(end-1, i+1)]
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return ""
		}
		i = skipSpace(obj, i+1)
		end = skipValue(obj, i)
		if k == key {
			return obj[i:end]
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ',' {
			return ""
		}
	}
}

// forEachRaw calls f with the raw text of each element of the JSON array
// arr. It does nothing when arr is not an array.
func forEachRaw(arr string, f func(raw string)) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i = skipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return
	}
	for i < len(arr) {
		end := skipValue(arr, i)
		if end == i {
			return
		}
		f(arr[i:end])
		i = skipSpace(arr, end)
		if i >= len(arr) || arr[i] != ',' {
			return
		}
		i = skipSpace(arr, i+1)
	}
}

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string token starting at
// s[i] == '"'.
func skipString(s string, i int) int {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(s)
}

// skipValue returns the index just past the value starting at s[i].
func skipValue(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = skipString(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(s)
	}
	for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] > ' ' {
		i++
	}
	return i
}
