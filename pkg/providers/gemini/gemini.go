// Package gemini is the provider for the Google Gemini API
// (generativelanguage.googleapis.com). It translates OpenAI chat
// completions and embeddings requests to Gemini's generateContent,
// streamGenerateContent (server-sent events) and batchEmbedContents, and
// Gemini's answers back to the OpenAI format, stream event by stream event.
//
// # Requests (OpenAI -> Gemini)
//
//   - system and developer messages become systemInstruction parts, in
//     order, wherever they appear in the conversation.
//   - user messages become "user" contents, assistant messages "model"
//     contents; consecutive messages of the same kind share one content, so
//     the results of parallel tool calls travel together. A message with no
//     content at all is dropped (Gemini refuses empty contents).
//   - content parts: text; image_url as inlineData for base64 data URLs and
//     as fileData for http(s) URLs, with the MIME type guessed from the file
//     extension (png, jpg, jpeg, webp, heic, heif, pdf; anything else is a
//     ParamError); input_audio as inlineData (audio/<format>); file with
//     file_data (a base64 data URL) as inlineData. URLs are never fetched.
//     image_url.detail is dropped.
//   - assistant tool_calls become functionCall parts; their arguments must
//     be a JSON object (an empty string counts as {}). A tool message becomes
//     a functionResponse part named after the earlier tool call with the same
//     id; its content is used as the response when it is a JSON object, and
//     is otherwise wrapped as {"content": "<text>"}.
//   - thought signatures: Gemini 3 requires the thoughtSignature of a
//     function call to come back with the conversation. It is handed to
//     clients as tool_calls[].extra_content.google.thought_signature (the
//     shape of Google's own OpenAI-compatible endpoint) and read back from
//     there; an assistant message whose tool calls carry none gets Google's
//     documented placeholder "skip_thought_signature_validator" on its first
//     call.
//   - tools become functionDeclarations. Their JSON schemas are reduced to
//     the OpenAPI subset Gemini accepts: local $ref/$defs are inlined, oneOf
//     becomes anyOf, allOf is merged (refused when its schemas set a key
//     twice, but for pattern: patterns it combines are dropped, as Gemini
//     takes one), const becomes enum,
//     type ["T","null"] and anyOf members of type null become nullable, and
//     every other key ($schema, additionalProperties, $id, examples,
//     exclusiveMinimum, patternProperties, ...) is dropped, as are string
//     formats other than enum and date-time, enums with non-string values
//     and empty properties objects. A function whose parameters have no
//     properties is declared without parameters. Only tools of type
//     "function" are accepted.
//   - tool_choice: "auto" -> AUTO, "none" -> NONE, "required" -> ANY, a
//     named function -> ANY with allowedFunctionNames; allowed_tools declares
//     only the allowed functions, with AUTO or ANY.
//   - response_format json_object -> responseMimeType application/json;
//     json_schema -> responseMimeType application/json plus responseSchema
//     (reduced as above, with propertyOrdering keeping the client's property
//     order); "strict" is dropped.
//   - stop -> stopSequences; max_completion_tokens or max_tokens ->
//     maxOutputTokens (Call.ClampMaxTokens, when positive, wins);
//     temperature, top_p, presence_penalty, frequency_penalty and seed map to
//     their generationConfig fields; n -> candidateCount (n > 1 is a
//     ParamError in streams); reasoning_effort -> thinkingConfig
//     (thinkingLevel for gemini-3 models, thinkingBudget otherwise: none 0,
//     minimal 512, low 1024, medium 8192, high 24576; a level a model does
//     not support is refused by Gemini itself).
//   - the other top-level members are mapped, dropped or refused (with a
//     ParamError naming the member) as Policy says; the Providers page's
//     table (docs/providers.md) is generated from it. Also refused: tool
//     types other than function, file_id references, token-array
//     embeddings input, and endpoints other than chat completions and
//     embeddings. Message names are dropped.
//
// # Answers (Gemini -> OpenAI)
//
// candidates[i] become choices[i]: text parts are concatenated into content,
// functionCall parts become tool_calls (id from functionCall.id, else the
// deterministic "call_<index>"), thought parts are dropped. finishReason
// STOP -> stop (tool_calls when the answer calls a function), MAX_TOKENS ->
// length, SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII and the
// IMAGE_* safety reasons -> content_filter, anything else -> stop. A prompt
// blocked by promptFeedback.blockReason is answered with empty content and
// finish_reason content_filter.
//
// usageMetadata: prompt_tokens = promptTokenCount + toolUsePromptTokenCount;
// completion_tokens = candidatesTokenCount + thoughtsTokenCount, because
// OpenAI counts reasoning inside completion tokens; cached_tokens =
// cachedContentTokenCount; reasoning_tokens = thoughtsTokenCount.
//
// Streams: Gemini sends no terminator, so the event carrying a finishReason
// ends the answer: the provider then writes the finish chunk, the usage
// chunk (when the client asked with stream_options.include_usage and
// Gemini reported usage) and "data: [DONE]" itself. An error object in the
// stream fails it with Gemini's message. Each function call arrives whole
// and is streamed as OpenAI does: a chunk with index, id, type and name,
// then one with the arguments.
//
// Embeddings use batchEmbedContents, one request per input string, with
// dimensions as outputDimensionality; encoding_format base64 is honoured
// (little-endian float32, then base64, as OpenAI). Gemini reports no token
// usage for embeddings unless it sends usageMetadata, so usage is then
// written as zeros and not marked reported.
//
// # Inbound (Gemini API clients)
//
// The gateway serves the Gemini API to clients too (issue #46):
// RequestToOpenAI and ResponseFromOpenAI translate a generateContent
// request to the OpenAI chat format and the answer back for targets of
// other kinds (inbound.go, which states the rules), Encoder turns an
// OpenAI stream into Gemini's chunks (SSE or the JSON array form), and
// BuildNative, NativeStream and NewPassthrough serve a client's request
// natively on this provider (native.go).
package gemini

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/valyala/fasthttp"
)

// DefaultBaseURL is the Gemini API root used when Options.BaseURL is empty.
const DefaultBaseURL = "https://generativelanguage.googleapis.com"

// KeyHeader is the request header that carries the API key.
const KeyHeader = "x-goog-api-key"

// DefaultAPIVersion is the API version path segment used when
// Options.APIVersion is empty.
const DefaultAPIVersion = "v1beta"

var _ providers.Provider = (*Provider)(nil)

// Options configure one Gemini provider.
type Options struct {
	Name string
	// BaseURL is the API root. Default DefaultBaseURL. When its path
	// already ends in a version segment (e.g. ".../v1beta"), APIVersion is
	// not added.
	BaseURL string
	// APIKey is sent as the x-goog-api-key header; a secret, never logged.
	APIKey string
	// APIVersion is the version path segment. Default DefaultAPIVersion.
	APIVersion string
	// Headers are sent on every request.
	Headers map[string]string
	// Now is the clock for the created field of answers. Default time.Now.
	Now func() time.Time
}

// Provider is a Gemini API upstream. Safe for concurrent use.
type Provider struct {
	name    string
	scheme  string
	host    string
	prefix  string // base path and version, e.g. "/v1beta"
	apiKey  []byte // a secret: never logged
	headers [][2]string
	now     func() time.Time
}

// New builds a provider from its options.
func New(o Options) (*Provider, error) {
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	if o.APIVersion == "" {
		o.APIVersion = DefaultAPIVersion
	}
	if strings.ContainsAny(o.APIVersion, "/?#") {
		return nil, fmt.Errorf("provider %s: api_version %q is not a path segment", o.Name, o.APIVersion)
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("provider %s: base_url %q is not an http(s) URL", o.Name, o.BaseURL)
	}
	p := &Provider{name: o.Name, scheme: u.Scheme, host: u.Host, apiKey: []byte(o.APIKey), now: o.Now}
	if p.now == nil {
		p.now = time.Now
	}
	base := strings.TrimRight(u.Path, "/")
	if last := base[strings.LastIndexByte(base, '/')+1:]; isVersion(last) {
		p.prefix = base
	} else {
		p.prefix = base + "/" + o.APIVersion
	}
	for k, v := range o.Headers {
		p.headers = append(p.headers, [2]string{k, v})
	}
	return p, nil
}

// isVersion reports whether a path segment names an API version, such as
// v1, v1beta or v1alpha.
func isVersion(s string) bool {
	if len(s) < 2 || s[0] != 'v' || s[1] < '0' || s[1] > '9' {
		return false
	}
	rest := strings.TrimLeft(s[1:], "0123456789")
	return rest == "" || rest == "alpha" || rest == "beta"
}

// Build writes the Gemini request for c: the method's URL, the API key
// header and the translated body. The model is placed in the URL path by
// providers.AppendPathSegment, so no model name can change the path, the
// method suffix or the query (issue #17).
func (p *Provider) Build(req *fasthttp.Request, c *providers.Call) error {
	var method string
	switch c.Endpoint {
	case providers.Chat:
		method = ":generateContent"
		if c.Stream {
			method = ":streamGenerateContent"
		}
	case providers.Embeddings:
		method = ":batchEmbedContents"
	default:
		return &providers.ParamError{Param: "model", Message: "the endpoint " + c.Endpoint.String() + ": Gemini serves chat completions and embeddings only"}
	}
	var buf [256]byte
	path := append(buf[:0], p.prefix...)
	path, err := appendModelPath(path, c.Model)
	if err != nil {
		return err
	}
	path = append(path, method...)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	var body []byte
	if c.Endpoint == providers.Chat {
		body, err = buildChat((*bp)[:0], c)
	} else {
		body, err = buildEmbeddings((*bp)[:0], c)
	}
	if cap(body) <= 1<<20 {
		*bp = body
	}
	if err != nil {
		return err
	}
	req.Header.SetMethod(fasthttp.MethodPost)
	uri := req.URI()
	uri.SetScheme(p.scheme)
	uri.SetHost(p.host)
	uri.SetPathBytes(path)
	if c.Stream && c.Endpoint == providers.Chat {
		uri.SetQueryString("alt=sse")
	}
	req.Header.SetContentType("application/json")
	if len(p.apiKey) > 0 {
		req.Header.SetBytesV(KeyHeader, p.apiKey)
	}
	for _, h := range p.headers {
		req.Header.Set(h[0], h[1])
	}
	if len(c.RequestID) > 0 {
		req.Header.SetBytesV("X-Request-Id", c.RequestID)
	}
	req.SetBody(body)
	return nil
}

// resourceCollections are the Gemini collections a model name may start
// with ("tunedModels/my-model"); the rest of such a name is one id.
var resourceCollections = [...]string{"models/", "tunedModels/"}

// splitResource returns a model's collection ("models/" unless the name
// starts with another known one) and its id.
func splitResource(model string) (collection, id string) {
	for _, c := range resourceCollections {
		if strings.HasPrefix(model, c) {
			return c, model[len(c):]
		}
	}
	return "models/", model
}

// appendModelPath appends "/{collection}/{id}" for the model, the id
// escaped as one path segment. A Gemini model id has no "/" of its own, so
// a name with one outside a known collection prefix is refused.
func appendModelPath(dst []byte, model string) ([]byte, error) {
	collection, id := splitResource(model)
	if strings.IndexByte(id, '/') >= 0 {
		return dst, &providers.ParamError{Param: "model", Code: providers.CodeInvalidURLValue,
			Message: fmt.Sprintf("Gemini model ids contain no \"/\" (want an id, models/{id} or tunedModels/{id}); got %q", model)}
	}
	dst = append(dst, '/')
	dst = append(dst, collection...)
	return providers.AppendPathSegment(dst, "model", id)
}

// modelResource returns the model's resource name, "models/{model}" unless
// it already names a resource.
func modelResource(model string) string {
	collection, id := splitResource(model)
	return collection + id
}

// ErrorMessage reads error.message of a Gemini error body, which streamed
// calls without alt=sse wrap in an array.
func (p *Provider) ErrorMessage(body []byte) string {
	s := bytesString(body)
	for _, path := range [...]string{"error.message", "0.error.message", "message"} {
		if m := gjson.Get(s, path); m.Type == gjson.String {
			return m.String()
		}
	}
	return ""
}
