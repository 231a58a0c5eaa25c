package mockllm

import (
	"strconv"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// Limits keep a single request from asking the mock for unbounded work.
const (
	maxChunks = 1 << 16
	maxDims   = 1 << 14
	maxDelay  = 10 * time.Minute
)

// behaviour is how the mock answers one request. It starts from the server
// defaults, then the request body's "mock" object, then X-Mock-* headers
// override it (header wins over body, body over flag).
type behaviour struct {
	chunks          int           // stream content chunks
	words           int           // non-stream completion words; -1: same as chunks
	chunkDelay      time.Duration // before each content chunk after the first
	latency         time.Duration // before the response header
	firstChunkDelay time.Duration // after the header, before the first event
	status          int           // answer this error status; 0: none
	cutAfter        int           // stream: close after N content chunks; -1: off
	errorEventAfter int           // stream: error event after N content chunks; -1: off
	garbage         bool          // invalid JSON body or a non-SSE line
	noUsage         bool          // omit usage everywhere
	dims            int           // embeddings dimensions; 0: request or default
	faults                        // faults.go: refusals, overflow, bad usage, error-event status, healthy
	cachedTokens    int           // Responses API usage details
	cacheWrite      int           // Anthropic usage: cache_creation_input_tokens
	reasoningTokens int
	toolCalls       int // tool calls in the answer; 0: as the request's tool choice decides (tools.go)
}

// injected reports whether the behaviour injects a failure.
func (b *behaviour) injected() bool {
	return b.status != 0 || b.garbage || b.cutAfter >= 0 || b.errorEventAfter >= 0 || b.faults.injected()
}

// optionID names one per-request setting.
type optionID uint8

const (
	optChunks optionID = iota
	optWords
	optChunkDelay
	optLatency
	optFirstChunkDelay
	optStatus
	optCutAfter
	optGarbage
	optNoUsage
	optDims
	optErrorEventAfter
	optRefusal
	optContextOverflow
	optBadUsage
	optErrorEventStatus
	optHealthy
	optCachedTokens
	optCacheWriteTokens
	optReasoningTokens
	optToolCalls
)

// options lists every per-request setting with its header and its key in
// the body's "mock" object. Booleans take 0/1 (or false/true); durations
// are whole milliseconds.
var options = [...]struct {
	id          optionID
	header, key string
}{
	{optChunks, "X-Mock-Chunks", "chunks"},
	{optWords, "X-Mock-Words", "words"},
	{optChunkDelay, "X-Mock-Chunk-Delay-Ms", "chunk_delay_ms"},
	{optLatency, "X-Mock-Latency-Ms", "latency_ms"},
	{optFirstChunkDelay, "X-Mock-First-Chunk-Delay-Ms", "first_chunk_delay_ms"},
	{optStatus, "X-Mock-Status", "status"},
	{optCutAfter, "X-Mock-Cut-After", "cut_after"},
	{optGarbage, "X-Mock-Garbage", "garbage"},
	{optNoUsage, "X-Mock-No-Usage", "no_usage"},
	{optDims, "X-Mock-Dims", "dims"},
	{optErrorEventAfter, "X-Mock-Error-Event-After", "error_event_after"},
	{optRefusal, "X-Mock-Refusal", "refusal"},
	{optContextOverflow, "X-Mock-Context-Overflow", "context_overflow"},
	{optBadUsage, "X-Mock-Bad-Usage", "bad_usage"},
	{optErrorEventStatus, "X-Mock-Error-Event-Status", "error_event_status"},
	{optHealthy, "X-Mock-Healthy", "healthy"},
	{optCachedTokens, "X-Mock-Cached-Tokens", "cached_tokens"},
	{optCacheWriteTokens, "X-Mock-Cache-Write-Tokens", "cache_write_tokens"},
	{optReasoningTokens, "X-Mock-Reasoning-Tokens", "reasoning_tokens"},
	{optToolCalls, "X-Mock-Tool-Calls", "tool_calls"},
}

// set stores v in the setting id, bounded to a sane range.
func (b *behaviour) set(id optionID, v int64) {
	switch id {
	case optChunks:
		b.chunks = int(clamp(v, 0, maxChunks))
	case optWords:
		b.words = int(clamp(v, 0, maxChunks))
	case optChunkDelay:
		b.chunkDelay = millis(v)
	case optLatency:
		b.latency = millis(v)
	case optFirstChunkDelay:
		b.firstChunkDelay = millis(v)
	case optStatus:
		b.status = statusOption(v)
	case optCutAfter:
		b.cutAfter = int(clamp(v, -1, maxChunks))
	case optGarbage:
		b.garbage = v != 0
	case optNoUsage:
		b.noUsage = v != 0
	case optDims:
		b.dims = int(clamp(v, 0, maxDims))
	case optErrorEventAfter:
		b.errorEventAfter = int(clamp(v, -1, maxChunks))
	case optCachedTokens:
		b.cachedTokens = int(clamp(v, 0, 1<<30))
	case optCacheWriteTokens:
		b.cacheWrite = int(clamp(v, 0, 1<<30))
	case optReasoningTokens:
		b.reasoningTokens = int(clamp(v, 0, 1<<30))
	case optToolCalls:
		b.toolCalls = int(clamp(v, 0, maxToolCalls))
	default:
		b.faults.set(id, v)
	}
}

// resolveBehaviour applies the body's "mock" object and then the X-Mock-*
// headers to the defaults d. Unknown keys and unparsable values are ignored.
func resolveBehaviour(d behaviour, mock gjson.Result, h *fasthttp.RequestHeader) behaviour {
	b := d
	if mock.IsObject() {
		mock.ForEach(func(k, v gjson.Result) bool {
			for _, o := range options {
				if k.Str == o.key {
					if n, ok := jsonInt(v); ok {
						b.set(o.id, n)
					}
					break
				}
			}
			return true
		})
	}
	for _, o := range options {
		if n, ok := headerInt(h.Peek(o.header)); ok {
			b.set(o.id, n)
		}
	}
	if b.words < 0 {
		b.words = b.chunks
	}
	if b.healthy {
		b.heal()
	}
	return b
}

// jsonInt reads a number or boolean body value.
func jsonInt(r gjson.Result) (int64, bool) {
	switch r.Type {
	case gjson.Number:
		return int64(r.Num), true
	case gjson.True:
		return 1, true
	case gjson.False:
		return 0, true
	}
	return 0, false
}

// headerInt reads an integer or boolean header value.
func headerInt(v []byte) (int64, bool) {
	switch string(v) {
	case "":
		return 0, false
	case "true", "True", "TRUE", "yes":
		return 1, true
	case "false", "False", "FALSE", "no":
		return 0, true
	}
	n, err := strconv.ParseInt(b2s(v), 10, 64)
	return n, err == nil
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// millis converts a millisecond option to a bounded, non-negative duration.
func millis(v int64) time.Duration {
	return time.Duration(clamp(v, 0, int64(maxDelay/time.Millisecond))) * time.Millisecond
}

// statusOption keeps only error statuses; anything else means "no error".
func statusOption(v int64) int {
	if v >= 400 && v <= 599 {
		return int(v)
	}
	return 0
}
