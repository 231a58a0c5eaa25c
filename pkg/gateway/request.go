package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/rawjson"
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

// reqInfo is what the gateway reads from a request body, in one pass
// (rawjson.Scan). Its strings alias the body and are valid only while the
// body is. Later stages use it instead of reading the body again.
type reqInfo struct {
	model        string // the requested model name
	modelRaw     string // the JSON value of "model" as written, quotes included
	modelIdx     int    // byte offset of modelRaw in the body
	stream       bool
	includeUsage bool // stream_options.include_usage
	streamOpts   string
	streamOptIdx int
	// includeUsageAt is stream_options.include_usage as written, with its
	// offset in the body (Raw "" when absent).
	includeUsageAt providers.Member
	hasMessages    bool
	hasPrompt      bool
	hasInput       bool
	// maxTokens is the request's output limit per choice (outputLimit), 0
	// when it sets none.
	maxTokens int64
	// choices is how many answers the upstream generates for the request:
	// n, or best_of when larger, on chat and completions; at least 1.
	choices int64
	// maxAt locates max_tokens, max_completion_tokens and
	// max_output_tokens (in that order), for the byte-level clamp.
	maxAt [3]providers.Member
	// background is the Responses API's "background": true (refused).
	background bool
	// fileRefs: an object at some depth has a "file_id" member (owners.go).
	fileRefs bool
	ep       endpoint
}

// watchedKeys are the top-level keys the gateway reads or edits, in the
// order of the fields rawjson.Scan fills.
var watchedKeys = [...]string{"model", "stream", "stream_options", "messages", "prompt", "input", "max_tokens", "max_completion_tokens", "max_output_tokens", "background", "n", "best_of"}

const (
	keyModel = iota
	keyStream
	keyStreamOptions
	keyMessages
	keyPrompt
	keyInput
	keyMaxTokens  // keyMaxTokens+1, +2: max_completion_tokens, max_output_tokens
	keyBackground = keyMaxTokens + 3
	keyN          = keyBackground + 1
	keyBestOf     = keyN + 1
)

// parseRequest checks the body and reads the fields the gateway needs into
// info in one pass (rawjson.Scan): valid JSON as encoding/json accepts it, nesting
// at most providers.MaxJSONDepth, UTF-8, an object. Nothing is decoded into
// Go values: the body is forwarded with byte-level edits.
//
// A watched key may be written with escapes ("mod\u0065l"): it is the same
// key, as every JSON parser upstream reads it, so it is read, edited and
// counted as a repeat like the plain spelling.
func parseRequest(body []byte, ep endpoint, info *reqInfo) *apiError {
	*info = reqInfo{ep: ep}
	if len(bytes.TrimSpace(body)) == 0 {
		return errBadRequest(codeInvalidJSON, "", "request body is empty; send a JSON object")
	}
	var f [len(watchedKeys)]rawjson.Field
	refs, err := rawjson.ScanFind(body, providers.MaxJSONDepth, watchedKeys[:], f[:], fileIDKey)
	if err != nil {
		return scanError(err)
	}
	info.fileRefs = refs
	if aerr := checkMembers(&f); aerr != nil {
		return aerr
	}
	if aerr := checkTypes(&f, ep); aerr != nil {
		return aerr
	}
	m := &f[keyModel]
	info.model, info.modelRaw, info.modelIdx = rawjson.Unquote(m.Raw), m.Raw, m.Idx
	info.stream = f[keyStream].Raw == "true"
	if so := &f[keyStreamOptions]; so.Raw != "" {
		// An object or null (checkTypes), located either way: asking the
		// upstream for usage replaces the client's member, never adds a
		// second one (issue #41).
		info.streamOpts, info.streamOptIdx = so.Raw, so.Idx
		iu, aerr := includeUsage(so)
		if aerr != nil {
			return aerr
		}
		info.includeUsageAt, info.includeUsage = iu, iu.Raw == "true"
	}
	info.hasMessages = nonEmptyArray(f[keyMessages].Raw)
	info.hasPrompt = f[keyPrompt].Raw != "" && f[keyPrompt].Raw != "null"
	info.hasInput = f[keyInput].Raw != "" && f[keyInput].Raw != "null"
	for i := range info.maxAt {
		info.maxAt[i] = providers.Member{Raw: f[keyMaxTokens+i].Raw, Idx: f[keyMaxTokens+i].Idx}
	}
	info.maxTokens, info.choices = outputLimit(&f, ep), choices(&f, ep)
	info.background = f[keyBackground].Raw == "true"
	if info.model == "" {
		return errBadRequest(codeMissingField, "model", "you must provide a model parameter")
	}
	switch ep {
	case epChat:
		if !info.hasMessages {
			return errBadRequest(codeMissingField, "messages", "messages must be a non-empty array")
		}
	case epCompletions:
		if !info.hasPrompt {
			return errBadRequest(codeMissingField, "prompt", "you must provide a prompt parameter")
		}
	case epEmbeddings:
		if !info.hasInput {
			return errBadRequest(codeMissingField, "input", "you must provide an input parameter")
		}
		info.stream = false
	}
	return nil
}

// scanError is the answer to a body rawjson.Scan refused.
func scanError(err error) *apiError {
	var e *rawjson.Error
	errors.As(err, &e)
	switch {
	case errors.Is(err, rawjson.ErrDepth):
		return errBadRequest(codeInvalidJSON, "", fmt.Sprintf("request body nests deeper than %d levels", providers.MaxJSONDepth))
	case errors.Is(err, rawjson.ErrUTF8) && e != nil:
		return utf8Error(e.Offset)
	case errors.Is(err, rawjson.ErrNotObject):
		return errBadRequest(codeInvalidJSON, "", "request body must be a JSON object")
	}
	return errBadRequest(codeInvalidJSON, "", "request body is not valid JSON")
}

// checkMembers refuses, in body order, the first member the gateway cannot
// act on: a repeated watched key (it could be read one way here and
// another way upstream) or a model that is not a string.
func checkMembers(f *[len(watchedKeys)]rawjson.Field) *apiError {
	first, key := -1, -1 // offset and key of the first problem
	if m := f[keyModel].Raw; m != "" && m[0] != '"' {
		first = f[keyModel].Idx
	}
	for i := range f {
		if r := f[i].Repeat; r > 0 && (first < 0 || r < first) {
			first, key = r, i
		}
	}
	switch {
	case first < 0:
		return nil
	case key >= 0:
		return errBadRequest("duplicate_key", watchedKeys[key], fmt.Sprintf("the key %q appears more than once", watchedKeys[key]))
	}
	return errBadRequest("invalid_type", "model", "model must be a string")
}

// includeUsage finds include_usage in the stream_options object so (a few
// bytes, not the body). A repeated include_usage is refused like a
// repeated top-level key: the gateway edits it.
func includeUsage(so *rawjson.Field) (providers.Member, *apiError) {
	var iu providers.Member
	n := 0
	rawjson.EachMember(so.Raw, func(key, val string, at int) bool {
		if rawjson.KeyIs(key, "include_usage") {
			if n++; n == 1 {
				iu = providers.Member{Raw: val, Idx: so.Idx + at}
			}
		}
		return true
	})
	if n > 1 {
		return iu, errBadRequest("duplicate_key", "stream_options.include_usage", `the key "stream_options.include_usage" appears more than once`)
	}
	if !isBool(iu.Raw) {
		return iu, errType("stream_options.include_usage", "a boolean")
	}
	return iu, nil
}

// nonEmptyArray reports whether raw is an array with an element.
func nonEmptyArray(raw string) bool {
	if len(raw) < 2 || raw[0] != '[' {
		return false
	}
	for _, c := range []byte(raw[1:]) {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c != ']'
		}
	}
	return false
}

// outputLimit is the request's output limit per choice: on the Responses
// API max_output_tokens; on chat and completions max_tokens or
// max_completion_tokens, the larger when both are set (a server reads one
// or the other; the reservation covers either, and a clamp rewrites
// both); 0 when none is set. checkTypes made each a non-negative integer
// or null.
func outputLimit(f *[len(watchedKeys)]rawjson.Field, ep endpoint) int64 {
	var v int64
	for i := keyMaxTokens; i < keyMaxTokens+3; i++ {
		if limitField(i, ep) {
			v = max(v, count(f[i].Raw))
		}
	}
	return v
}

// limitField reports whether watched key i is an output limit that
// servers of endpoint ep read.
func limitField(i int, ep endpoint) bool {
	switch ep {
	case epChat, epCompletions:
		return i == keyMaxTokens || i == keyMaxTokens+1
	case epResponses:
		return i == keyMaxTokens+2
	}
	return false
}

// choices is how many answers the upstream generates: on chat and
// completions n, or best_of when larger (the server generates best_of and
// returns n, and bills all of them); 1 elsewhere and when neither is set.
func choices(f *[len(watchedKeys)]rawjson.Field, ep endpoint) int64 {
	if ep != epChat && ep != epCompletions {
		return 1
	}
	return max(count(f[keyN].Raw), count(f[keyBestOf].Raw), 1)
}

// count reads a member checkTypes accepted as a count (digits, or null or
// absent: 0), saturating at the largest int64.
func count(raw string) int64 {
	if raw == "" || raw[0] < '0' || raw[0] > '9' {
		return 0
	}
	if len(raw) <= 15 {
		return rawjson.Int(raw)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return math.MaxInt64 // digits only: out of range
	}
	return n
}

// checkTypes refuses a member the gateway acts on whose value is of
// another type than it acts on, since a lenient server upstream could read
// it as that type after the gateway read it as absent ("stream": "true"
// or "background": 1 as true, "max_tokens": "100000" as a number): the
// booleans stream, background (Responses API) and
// stream_options.include_usage; the object stream_options; the counts
// max_tokens, max_completion_tokens (chat and completions),
// max_output_tokens (Responses API), n and best_of (chat and completions),
// written as non-negative integers. null stands for absent, as in the
// OpenAI API.
func checkTypes(f *[len(watchedKeys)]rawjson.Field, ep endpoint) *apiError {
	if !isBool(f[keyStream].Raw) {
		return errType("stream", "a boolean")
	}
	if ep == epResponses && !isBool(f[keyBackground].Raw) {
		return errType("background", "a boolean")
	}
	if so := f[keyStreamOptions].Raw; so != "" && so[0] != '{' && so != "null" {
		return errType("stream_options", "an object")
	}
	for i := keyMaxTokens; i < keyMaxTokens+3; i++ {
		if limitField(i, ep) && !isCount(f[i].Raw) {
			return errType(watchedKeys[i], "a non-negative integer")
		}
	}
	if ep == epChat || ep == epCompletions {
		for _, i := range [...]int{keyN, keyBestOf} {
			if !isCount(f[i].Raw) || f[i].Raw == "0" {
				return errType(watchedKeys[i], "a positive integer")
			}
		}
	}
	return nil
}

// errType refuses the member param for not being what.
func errType(param, what string) *apiError {
	return errBadRequest("invalid_type", param, fmt.Sprintf("%s must be %s", param, what))
}

// isBool reports whether raw is a JSON boolean, null, or absent.
func isBool(raw string) bool {
	return raw == "" || raw == "true" || raw == "false" || raw == "null"
}

// isCount reports whether raw is a JSON integer of digits alone (no sign,
// fraction or exponent), null, or absent.
func isCount(raw string) bool {
	if raw == "" || raw == "null" {
		return true
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return false
		}
	}
	return true
}

// fill sets the call fields that come from the body.
func (info *reqInfo) fill(c *providers.Call) {
	c.ModelRaw, c.ModelIdx = info.modelRaw, info.modelIdx
	c.Stream, c.IncludeUsage = info.stream, info.includeUsage
	c.StreamOptionsRaw, c.StreamOptionsIdx = info.streamOpts, info.streamOptIdx
	c.IncludeUsageAt = info.includeUsageAt
	c.MaxTokens = info.maxTokens
	c.MaxTokensAt, c.MaxCompletionTokensAt, c.MaxOutputTokensAt = info.maxAt[0], info.maxAt[1], info.maxAt[2]
	c.Scanned = true
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
	return utf8Error(off)
}

// utf8Error refuses a body that is not UTF-8 from byte offset off on.
func utf8Error(off int) *apiError {
	return errBadRequest(codeInvalidJSON, "", fmt.Sprintf("request body is not valid UTF-8 (byte offset %d); JSON text must be UTF-8", off))
}

// unsafeString views b as a string without copying; b must not change while
// the string is in use.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
