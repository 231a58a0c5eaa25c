// Package providers speaks each upstream's wire protocol. The gateway works
// in the OpenAI format: a Provider turns an OpenAI-format call into its own
// request, and its answers (whole bodies or stream events) back into the
// OpenAI format. Each kind lives in its own subpackage; this package holds
// the one small interface they implement and the types they share. Package
// kind names the kinds and what their config needs; package registry says,
// per kind, how it is built, authenticated and what it serves.
//
// The hot path matters: a Provider is built once per configured provider,
// is safe for concurrent use, and Build and the stream Event method are
// written to allocate nothing per call in steady state (translating kinds
// reuse the dst buffers they are given).
package providers

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strconv"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/valyala/fasthttp"
)

// Endpoint is the OpenAI endpoint a call was made to.
type Endpoint uint8

// Endpoints the gateway serves.
const (
	Chat Endpoint = iota
	Completions
	Embeddings
	Responses
)

// String returns the endpoint's path below /v1, e.g. "/chat/completions".
func (e Endpoint) String() string {
	switch e {
	case Chat:
		return "/chat/completions"
	case Completions:
		return "/completions"
	case Embeddings:
		return "/embeddings"
	case Responses:
		return "/responses"
	}
	return "/unknown"
}

// Call is one upstream call for an OpenAI-format request. Its byte slices
// alias the client request and are valid until the call is built.
type Call struct {
	Endpoint Endpoint
	// Body is the client's OpenAI-format JSON body, unchanged.
	Body []byte
	// Model is the upstream's name for the model.
	Model string
	// ModelRaw and ModelIdx locate the body's "model" value (quotes
	// included) for a byte-level rewrite; ModelJSON is the replacement
	// (nil when Model is the name the client sent).
	ModelRaw  string
	ModelIdx  int
	ModelJSON []byte
	// Stream is true for "stream": true.
	Stream bool
	// IncludeUsage is the client's stream_options.include_usage.
	IncludeUsage bool
	// StreamOptionsRaw and StreamOptionsIdx locate the body's
	// stream_options value (empty when absent), so a provider can ask for
	// usage without a JSON round trip.
	StreamOptionsRaw string
	StreamOptionsIdx int
	// IncludeUsageAt locates stream_options.include_usage in the body.
	IncludeUsageAt Member
	// MaxTokens is the request's output limit per choice: max_tokens or
	// max_completion_tokens, the larger when both are set
	// (max_output_tokens on the Responses API); 0 when absent.
	// ClampMaxTokens, when positive, replaces it (budget clamping): a
	// provider that passes the body through writes it on every such
	// field the body has.
	MaxTokens      int64
	ClampMaxTokens int64
	// MaxTokensAt, MaxCompletionTokensAt and MaxOutputTokensAt locate the
	// body's max_tokens, max_completion_tokens and max_output_tokens, so a
	// provider writes ClampMaxTokens in place.
	MaxTokensAt, MaxCompletionTokensAt, MaxOutputTokensAt Member
	// Scanned is set when the gateway checked Body (valid JSON, nesting at
	// most MaxJSONDepth, UTF-8, an object; rawjson.Scan) and filled the
	// fields above from it: ModelRaw, StreamOptionsRaw and the ...At
	// members are then authoritative, an empty Raw meaning absent, and a
	// provider neither validates nor searches Body again (issue #18: large
	// prompts are read once). Without it a provider checks and searches
	// Body itself.
	Scanned bool
	// RequestID is sent upstream for correlation.
	RequestID []byte
	// Header gives read access to the client's request headers, for
	// headers a provider passes through (e.g. anthropic-beta).
	Header *fasthttp.RequestHeader
}

// Member is a top-level member of a request body: its value as written
// and the value's byte offset in the body. Raw is "" when the body has no
// such member.
type Member struct {
	Raw string
	Idx int
}

// Usage is token usage as reported by a provider.
type Usage struct {
	Prompt, Completion, Cached, Reasoning uint64
	// CacheWrite is the part of Prompt written to the provider's prompt
	// cache (Anthropic's cache_creation_input_tokens, Bedrock's
	// cacheWriteInputTokens), billed at the cache-write price.
	CacheWrite uint64
	// Tier is the service tier the provider reported it answered at
	// (OpenAI's service_tier), priced at that tier's prices when the entry
	// has them.
	Tier pricing.ServiceTier
	// Reported is true when the provider reported usage at all.
	Reported bool
}

// Count reads one token count of a provider's usage object as raw JSON: a
// number that is a non-negative integer below 2^64, written without
// fraction or exponent. Anything else (negative, fractional, "1e3", quoted,
// null, past 2^64-1) is not a count: ok is false, and the provider reports
// no usage for the answer, so that the gateway estimates it with its
// tokenizer (the usage event says estimated) instead of billing a number
// the upstream garbled. Every provider kind reads its counts with it.
func Count(raw string) (n uint64, ok bool) {
	if raw == "" {
		return 0, false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return 0, false // past 2^64-1 (ParseUint would say 2^64-1)
	}
	return n, true
}

// Counts reads the counts of one usage object (possibly over several
// events) and remembers whether every one was a count and every sum fit:
// a provider reports the usage only when OK.
type Counts struct{ bad bool }

// Read returns the count raw (Count), marking the usage bad when it is not
// one.
func (c *Counts) Read(raw string) uint64 {
	n, ok := Count(raw)
	c.bad = c.bad || !ok
	return n
}

// Sum returns a + b, marking the usage bad when it passes 2^64-1.
func (c *Counts) Sum(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	c.bad = c.bad || carry != 0
	return s
}

// OK reports whether every count read was one and every sum fit.
func (c *Counts) OK() bool { return !c.bad }

// Provider is one configured upstream.
type Provider interface {
	// Build fills req (method, URI, headers, body) for the call. The URI's
	// scheme and host are the provider's base URL. A request the provider
	// cannot honour returns a *ParamError (answered 400).
	Build(req *fasthttp.Request, c *Call) error
	// Response turns a complete 200 upstream body into the OpenAI-format
	// body for the client, appended to dst (or body itself, unchanged, when
	// no translation is needed), and reads its usage. A body that cannot be
	// read returns ErrMalformed.
	Response(dst, body []byte, c *Call) ([]byte, Usage, error)
	// Stream returns the decoder for a streamed answer to c.
	Stream(c *Call) Stream
	// ErrorMessage extracts the human-readable message from an upstream
	// error body ("" when there is none).
	ErrorMessage(body []byte) string
}

// Stream translates one streamed answer, event by event. It is used by one
// goroutine at a time.
type Stream interface {
	// Framer returns the framing of the upstream stream, or nil for
	// server-sent events (the gateway then uses its own SSE reader).
	Framer(src io.Reader) Framer
	// Event handles one upstream event (a whole SSE event including its
	// blank line, or one frame), appending the OpenAI-format SSE events for
	// the client to dst. The returned state says whether the answer is
	// complete (Done: stop reading), still going (More) or failed (Failed:
	// err describes it for the client's error event).
	Event(dst, ev []byte) ([]byte, State, error)
	// Complete reports whether the answer had a finish reason, so an end of
	// stream without a terminator still counts as complete.
	Complete() bool
	// Usage returns the usage reported so far.
	Usage() Usage
	// Close releases the decoder (it may be pooled).
	Close()
}

// ContentStream is a Stream that reads each event's delivered text while
// it handles it (the OpenAI decoder reads every chunk's first choice
// anyway). The gateway keeps that text to estimate the tokens of a stream
// that reports no usage, instead of parsing each event a second time.
type ContentStream interface {
	Stream
	// LastContent returns the text the last event delivered (its first
	// choice's delta.content, between the quotes, escapes kept), or "".
	// It aliases the event and is valid until the next read from upstream.
	LastContent() string
}

// State is what a stream event meant.
type State uint8

// Stream states.
const (
	More State = iota
	Done
	Failed
)

// Framer splits a non-SSE upstream stream into frames, like the gateway's
// SSE reader: Next returns a buffered frame without I/O, Fill reads once.
type Framer interface {
	Next() ([]byte, bool)
	Fill() error
	Buffered() []byte
}

// ErrMalformed is returned (wrapped) for upstream bodies and events that
// cannot be read.
var ErrMalformed = errors.New("malformed upstream answer")

// ParamError rejects a request parameter the provider cannot honour.
type ParamError struct {
	Param string
	// Code is the error code the client sees; empty means
	// "unsupported_parameter".
	Code    string
	Message string
}

// Error describes the parameter and why it was refused.
func (e *ParamError) Error() string { return fmt.Sprintf("%s: %s", e.Param, e.Message) }

// UpstreamError is a provider's error reported inside a stream.
type UpstreamError struct {
	Message string
}

// Error returns the provider's message.
func (e *UpstreamError) Error() string { return e.Message }

// MaxJSONDepth bounds the nesting of JSON the gateway validates: the
// validator recurses once per level, so hostile input like "[[[[..." must be
// refused before it is validated.
const MaxJSONDepth = 128

// ValidJSON reports whether b is valid JSON nesting at most MaxJSONDepth:
// what encoding/json's Valid accepts (strings holding bytes that are not
// UTF-8 included), in one pass.
func ValidJSON(b []byte) bool { return rawjson.Valid(b, MaxJSONDepth) }

// Shallow reports whether b nests arrays and objects at most max deep. It
// tracks strings so brackets inside them do not count; it validates nothing
// else.
func Shallow(b []byte, maxDepth int) bool { return rawjson.Shallow(b, maxDepth) }
