package gateway

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"
)

// endpoint is one of the OpenAI endpoints the gateway serves.
type endpoint uint8

const (
	epChat endpoint = iota
	epCompletions
	epEmbeddings
)

// upstreamPath is the endpoint's path below a provider's base URL.
var upstreamPath = [...][]byte{
	epChat:        []byte("/chat/completions"),
	epCompletions: []byte("/completions"),
	epEmbeddings:  []byte("/embeddings"),
}

var endpointName = [...]string{
	epChat:        "/v1/chat/completions",
	epCompletions: "/v1/completions",
	epEmbeddings:  "/v1/embeddings",
}

// reqInfo is what the gateway reads from a request body. Its strings alias
// the body and are valid only while the body is.
type reqInfo struct {
	model        string // the requested model name
	modelRaw     string // the JSON value of "model" as written, quotes included
	modelIdx     int    // byte offset of modelRaw in the body
	stream       bool
	includeUsage bool // stream_options.include_usage
	hasMessages  bool
	hasPrompt    bool
	hasInput     bool
	maxTokens    int64
}

// parseRequest reads the fields the gateway needs in one pass over the
// top-level keys, after checking the whole body is valid JSON. Nothing is
// decoded into Go values: the body is forwarded with byte-level edits.
func parseRequest(body []byte, ep endpoint) (reqInfo, *apiError) {
	var info reqInfo
	if len(bytes.TrimSpace(body)) == 0 {
		return info, errBadRequest("invalid_json", "", "request body is empty; send a JSON object")
	}
	if !shallowJSON(body, maxJSONDepth) {
		return info, errBadRequest("invalid_json", "", fmt.Sprintf("request body nests deeper than %d levels", maxJSONDepth))
	}
	if !gjson.ValidBytes(body) {
		return info, errBadRequest("invalid_json", "", "request body is not valid JSON")
	}
	root := gjson.Parse(unsafeString(body))
	if !root.IsObject() {
		return info, errBadRequest("invalid_json", "", "request body must be a JSON object")
	}
	var bad *apiError
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			if v.Type != gjson.String {
				bad = errBadRequest("invalid_type", "model", "model must be a string")
				return false
			}
			info.model, info.modelRaw, info.modelIdx = v.Str, v.Raw, v.Index
		case "stream":
			info.stream = v.Type == gjson.True
		case "stream_options":
			info.includeUsage = v.Get("include_usage").Type == gjson.True
		case "messages":
			info.hasMessages = v.IsArray() && len(v.Raw) > 2 && v.Get("#").Int() > 0
		case "prompt":
			info.hasPrompt = v.Type != gjson.Null
		case "input":
			info.hasInput = v.Type != gjson.Null
		case "max_tokens", "max_completion_tokens":
			if v.Type == gjson.Number {
				info.maxTokens = v.Int()
			}
		}
		return true
	})
	if bad != nil {
		return info, bad
	}
	if info.model == "" {
		return info, errBadRequest("missing_field", "model", "you must provide a model parameter")
	}
	switch ep {
	case epChat:
		if !info.hasMessages {
			return info, errBadRequest("missing_field", "messages", "messages must be a non-empty array")
		}
	case epCompletions:
		if !info.hasPrompt {
			return info, errBadRequest("missing_field", "prompt", "you must provide a prompt parameter")
		}
	case epEmbeddings:
		if !info.hasInput {
			return info, errBadRequest("missing_field", "input", "you must provide an input parameter")
		}
		info.stream = false
	}
	return info, nil
}

// maxJSONDepth bounds the nesting of JSON the gateway validates: the
// validator recurses once per level, so hostile input like "[[[[..." must be
// refused before it is validated.
const maxJSONDepth = 128

// shallowJSON reports whether b nests arrays and objects at most max deep.
// It tracks strings so brackets inside them do not count; it does not
// validate anything else.
func shallowJSON(b []byte, max int) bool {
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

// unsafeString views b as a string without copying; b must not change while
// the string is in use.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
