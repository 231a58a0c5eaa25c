package loadgen

import (
	"unsafe"

	"github.com/tidwall/gjson"
)

// checkChat validates a non-stream chat completion body: valid JSON with a
// non-empty choices[0].message.content.
func checkChat(body []byte) kind {
	s := unsafe.String(unsafe.SliceData(body), len(body)) // results do not outlive body
	if !gjson.Valid(s) {
		return kindBadJSON
	}
	if ct := gjson.Get(s, "choices.0.message.content"); ct.Type != gjson.String || len(ct.Raw) <= 2 {
		return kindEmptyContent
	}
	return kindOK
}

// checkEmbeddings validates an embeddings body: valid JSON and a non-empty
// data array whose every embedding has dims values (any number when dims
// is 0), either as a JSON array of numbers or as base64 little-endian
// float32s (encoding_format "base64").
func checkEmbeddings(body []byte, dims int) kind {
	s := unsafe.String(unsafe.SliceData(body), len(body))
	if !gjson.Valid(s) {
		return kindBadJSON
	}
	data := gjson.Get(s, "data")
	if !data.IsArray() {
		return kindBadEmbedding
	}
	vectors := 0
	ok := true
	data.ForEach(func(_, item gjson.Result) bool {
		vectors++
		n := vectorLen(item.Get("embedding"))
		ok = n > 0 && (dims == 0 || n == dims)
		return ok
	})
	if !ok || vectors == 0 {
		return kindBadEmbedding
	}
	return kindOK
}

// vectorLen returns the number of values of one embedding, or -1 when it is
// neither an array of numbers nor valid-looking base64 of float32s.
func vectorLen(e gjson.Result) int {
	switch {
	case e.IsArray():
		n := 0
		e.ForEach(func(_, v gjson.Result) bool {
			if v.Type != gjson.Number {
				n = -1
				return false
			}
			n++
			return true
		})
		return n
	case e.Type == gjson.String:
		raw := e.Raw[1 : len(e.Raw)-1]
		if len(raw)%4 != 0 {
			return -1
		}
		size := len(raw) / 4 * 3
		for i := len(raw) - 1; i >= 0 && raw[i] == '='; i-- {
			size--
		}
		if size%4 != 0 {
			return -1
		}
		return size / 4
	}
	return -1
}
