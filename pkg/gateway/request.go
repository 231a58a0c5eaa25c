package gateway

import (
	"bytes"
	"fmt"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
)

// endpoint is one of the OpenAI endpoints the gateway serves.
type endpoint = providers.Endpoint

const (
	epChat        = providers.Chat
	epCompletions = providers.Completions
	epEmbeddings  = providers.Embeddings
	epResponses   = providers.Responses
)

var endpointName = [...]string{
	epChat:        "/v1/chat/completions",
	epCompletions: "/v1/completions",
	epEmbeddings:  "/v1/embeddings",
	epResponses:   "/v1/responses",
}

// reqInfo is what the gateway reads from a request body. Its strings alias
// the body and are valid only while the body is.
type reqInfo struct {
	model        string // the requested model name
	modelRaw     string // the JSON value of "model" as written, quotes included
	modelIdx     int    // byte offset of modelRaw in the body
	stream       bool
	includeUsage bool // stream_options.include_usage
	streamOpts   string
	streamOptIdx int
	hasMessages  bool
	hasPrompt    bool
	hasInput     bool
	maxTokens    int64
	ep           endpoint
}

// watchedKeys are the top-level keys the gateway reads or edits.
var watchedKeys = [...]string{"model", "stream", "stream_options", "messages", "prompt", "input", "max_tokens", "max_completion_tokens", "max_output_tokens"}

// parseRequest reads the fields the gateway needs in one pass over the
// top-level keys, after checking the whole body is valid JSON. Nothing is
// decoded into Go values: the body is forwarded with byte-level edits.
func parseRequest(body []byte, ep endpoint) (reqInfo, *apiError) {
	info := reqInfo{ep: ep}
	if len(bytes.TrimSpace(body)) == 0 {
		return info, errBadRequest(codeInvalidJSON, "", "request body is empty; send a JSON object")
	}
	if !providers.Shallow(body, providers.MaxJSONDepth) {
		return info, errBadRequest(codeInvalidJSON, "", fmt.Sprintf("request body nests deeper than %d levels", providers.MaxJSONDepth))
	}
	if !gjson.ValidBytes(body) {
		return info, errBadRequest(codeInvalidJSON, "", "request body is not valid JSON")
	}
	if aerr := checkUTF8(body); aerr != nil {
		return info, aerr
	}
	root := gjson.Parse(unsafeString(body))
	if !root.IsObject() {
		return info, errBadRequest(codeInvalidJSON, "", "request body must be a JSON object")
	}
	var bad *apiError
	var seen [len(watchedKeys)]bool
	root.ForEach(func(k, v gjson.Result) bool {
		// A repeated key the gateway acts on could be read one way here and
		// another way upstream: refuse it.
		for i, w := range watchedKeys {
			if k.Str == w {
				if seen[i] {
					bad = errBadRequest("duplicate_key", w, fmt.Sprintf("the key %q appears more than once", w))
					return false
				}
				seen[i] = true
			}
		}
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
			if v.IsObject() {
				info.streamOpts, info.streamOptIdx = v.Raw, v.Index
			}
		case "messages":
			info.hasMessages = v.IsArray() && len(v.Raw) > 2 && v.Get("#").Int() > 0
		case "prompt":
			info.hasPrompt = v.Type != gjson.Null
		case "input":
			info.hasInput = v.Type != gjson.Null
		case "max_tokens", "max_completion_tokens":
			if v.Type == gjson.Number && ep != epResponses {
				info.maxTokens = v.Int()
			}
		case "max_output_tokens": // the Responses API's
			if v.Type == gjson.Number && ep == epResponses {
				info.maxTokens = v.Int()
			}
		}
		return true
	})
	if bad != nil {
		return info, bad
	}
	if info.model == "" {
		return info, errBadRequest(codeMissingField, "model", "you must provide a model parameter")
	}
	switch ep {
	case epChat:
		if !info.hasMessages {
			return info, errBadRequest(codeMissingField, "messages", "messages must be a non-empty array")
		}
	case epCompletions:
		if !info.hasPrompt {
			return info, errBadRequest(codeMissingField, "prompt", "you must provide a prompt parameter")
		}
	case epEmbeddings:
		if !info.hasInput {
			return info, errBadRequest(codeMissingField, "input", "you must provide an input parameter")
		}
		info.stream = false
	}
	return info, nil
}

// checkUTF8 refuses a body that is not UTF-8. JSON text must be UTF-8 (RFC
// 8259) and providers reject or mangle other bytes, so the gateway refuses
// them with a clear 400 instead of forwarding them or replacing them
// silently. Escaped lone surrogates ("\ud800") are valid JSON and pass.
func checkUTF8(body []byte) *apiError {
	if utf8.Valid(body) {
		return nil
	}
	off := 0
	for off < len(body) {
		r, n := utf8.DecodeRune(body[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	return errBadRequest(codeInvalidJSON, "", fmt.Sprintf("request body is not valid UTF-8 (byte offset %d); JSON text must be UTF-8", off))
}

// unsafeString views b as a string without copying; b must not change while
// the string is in use.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
