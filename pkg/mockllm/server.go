// Package mockllm is a deterministic mock LLM upstream speaking the OpenAI
// wire format (non-stream and SSE), used by tests, the dev config and load
// benchmarks.
//
// Answers are generated from a fixed word list, cycled, so the same request
// always yields the same text. Token counts are documented rather than
// tokenizer-exact: prompt_tokens is the number of whitespace-separated words
// across all message contents (string content or text parts) plus 3 per
// message (for /v1/completions and /v1/embeddings, the words of the prompt or
// input strings, and one per token id); completion_tokens is the number of
// generated content words, one per stream chunk.
//
// Behaviour is set by Config and, per request, by X-Mock-* headers or by a
// "mock" object in the JSON body (header wins over body, body over Config):
//
//	header                      body key              effect
//	X-Mock-Chunks               chunks                stream content chunks (default Config.Chunks, 8)
//	X-Mock-Words                words                 non-stream completion words (default: chunks)
//	X-Mock-Chunk-Delay-Ms       chunk_delay_ms        wait before each content chunk after the first
//	X-Mock-Latency-Ms           latency_ms            wait before the response header
//	X-Mock-First-Chunk-Delay-Ms first_chunk_delay_ms  wait after the header, before the first event
//	X-Mock-Status               status                answer this 4xx/5xx with an OpenAI error body (429, 503: Retry-After: 1)
//	X-Mock-Cut-After            cut_after             stream: close the connection after N content chunks
//	X-Mock-Garbage              garbage               invalid JSON body; stream: a non-SSE line, then close
//	X-Mock-No-Usage             no_usage              omit usage everywhere
//	X-Mock-Dims                 dims                  embedding dimensions
//	X-Mock-Error-Event-After    error_event_after     stream: an error event after N content chunks, then end
//	X-Mock-Error-Event-Status   error_event_status    that event is the error of this status (429 rate limit, 529 overloaded)
//	X-Mock-Refusal              refusal               400 content-policy refusal (code content_policy_violation)
//	X-Mock-Context-Overflow     context_overflow      400 context-length overflow (code context_length_exceeded)
//	X-Mock-Bad-Usage            bad_usage             usage present but malformed (counts not non-negative integers)
//	X-Mock-Healthy              healthy               cancel every injected failure (a provider's static header)
//	X-Mock-Cached-Tokens        cached_tokens         Responses API: input_tokens_details.cached_tokens
//	X-Mock-Cache-Write-Tokens   cache_write_tokens    Anthropic: cache_creation_input_tokens (at most the prompt; input_tokens is the rest)
//	X-Mock-Reasoning-Tokens     reasoning_tokens      Responses API: output_tokens_details.reasoning_tokens
//	X-Mock-Tool-Calls           tool_calls            tool calls in the answer (at most 16); 0: as tool_choice decides
//
// Booleans take 1/0 or true/false; delays are whole milliseconds.
// cut_after, garbage and error_event_after stop a stream after that many
// content chunks (garbage alone: after 0), with no finish_reason, usage
// chunk or [DONE]. Non-stream answers ignore them, except garbage.
// Refusal, overflow, bad usage and the error-event status speak the OpenAI
// format; healthy applies to every format, so one mock can serve a route's
// failing primary and, through a provider sending X-Mock-Healthy: 1, its
// healthy fallback (see faults.go).
//
// A chat or completions request with "service_tier": "flex" or "priority"
// gets that service_tier back next to its usage (the answer's, or the
// stream's usage chunk), as OpenAI reports the tier it served at.
//
// Any model name is answered. Requests that declare tools (chat, and the
// Anthropic, Gemini and Bedrock formats) get tool calls as tools.go says:
// tool_choice is honoured, auto calls a tool when the last user message
// names it (or tool_calls asks), arguments follow each tool's JSON schema
// (schema.go), several calls come in one answer when tool_calls asks and
// the request allows it, and a tool result as the last message is answered
// with text quoting it. finish_reason is "tool_calls"; streamed, each
// call's arguments are split over several deltas.
//
// Endpoints: POST /v1/chat/completions, /v1/completions, /v1/embeddings,
// /v1/responses (the Responses API, see responses.go);
// GET /v1/models, /v1/models/{id}; GET /stats (Stats as JSON) and
// POST /stats/reset (which also empties the ledger); GET /ledger (Ledger as
// JSON) and POST /ledger/reset; and images, audio, moderations, files and
// batches (see passthrough.go).
package mockllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Config sets the server-wide defaults; every field can be overridden per
// request (see the package documentation).
type Config struct {
	// Chunks is the number of content chunks in a streamed answer, and of
	// words in a non-stream one. Default 8.
	Chunks int
	// ChunkDelay is the wait before each content chunk after the first.
	// Default 0.
	ChunkDelay time.Duration
	// Latency is the wait before the response header. Default 0.
	Latency time.Duration
	// Dims is the embedding size when a request names none. Default 1536.
	Dims int
	// Logger receives the HTTP server's own error messages at debug level.
	// Default: discard.
	Logger *slog.Logger
}

// Server is a mock upstream. Create it with New, then either mount Handler
// on a fasthttp server or call Serve.
type Server struct {
	defaults behaviour
	dims     int
	srv      *fasthttp.Server
	handler  fasthttp.RequestHandler
	stats    counters
	ledger   ledger
	models   []byte // precomputed GET /v1/models body

	seed uint64 // scrambles response ids so two servers rarely collide
	ids  atomic.Uint64

	stop     chan struct{} // closed by Shutdown: pending waits end at once
	stopOnce sync.Once

	scratch sync.Pool // *scratch
	streams sync.Pool // *stream

	st store // files and batches (passthrough.go)
}

// scratch is the per-request working memory of a non-stream answer.
type scratch struct {
	buf   []byte
	vec   []float32
	timer *time.Timer
}

// New returns a server with cfg's defaults filled in.
func New(cfg Config) *Server {
	if cfg.Chunks <= 0 {
		cfg.Chunks = 8
	}
	if cfg.Dims <= 0 {
		cfg.Dims = 1536
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		defaults: behaviour{
			chunks:          min(cfg.Chunks, maxChunks),
			words:           -1,
			chunkDelay:      max(cfg.ChunkDelay, 0),
			latency:         max(cfg.Latency, 0),
			cutAfter:        -1,
			errorEventAfter: -1,
		},
		dims: min(cfg.Dims, maxDims),
		seed: uint64(time.Now().UnixNano()) * 0x9e3779b97f4a7c15,
		stop: make(chan struct{}),
		st:   store{files: map[string]*mockFile{}, batches: map[string]*mockBatch{}},
	}
	s.handler = s.handle
	s.models = appendModels(nil, time.Now().Unix())
	s.srv = &fasthttp.Server{
		Handler:                      s.handler,
		Name:                         "mockllm",
		NoDefaultDate:                true,
		NoDefaultContentType:         true,
		MaxRequestBodySize:           64 << 20,
		ReadBufferSize:               16 << 10, // room for large request headers
		ReadTimeout:                  30 * time.Second,
		IdleTimeout:                  120 * time.Second,
		Logger:                       fasthttpLogger{cfg.Logger},
		CloseOnShutdown:              true,
		DisablePreParseMultipartForm: true,
		// Uploads (files, audio) are read as they stream, never held.
		StreamRequestBody: true,
	}
	s.scratch.New = func() any { return &scratch{timer: newStoppedTimer()} }
	s.streams.New = func() any { return &stream{timer: newStoppedTimer()} }
	return s
}

// Handler returns the request handler, to mount on a caller's own server.
func (s *Server) Handler() fasthttp.RequestHandler { return s.handler }

// Serve answers requests on ln until Shutdown is called; it then returns nil.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.srv.Serve(ln); err != nil {
		return fmt.Errorf("serve mock llm on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Shutdown stops accepting connections and waits for open ones to finish.
// Pending latency and chunk delays are skipped, so streams in flight run to
// their end at once instead of holding the shutdown.
func (s *Server) Shutdown() error {
	s.stopOnce.Do(func() { close(s.stop) })
	if err := s.srv.ShutdownWithContext(context.Background()); err != nil {
		return fmt.Errorf("shut down mock llm: %w", err)
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats { return s.stats.snapshot() }

// ResetStats zeroes the counters and empties the ledger.
func (s *Server) ResetStats() {
	s.stats.reset()
	s.ledger.reset()
}

// handle routes one request.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	s.stats.requests.Add(1)
	path := ctx.Path()
	switch string(path) {
	case "/v1/chat/completions":
		if s.method(ctx, fasthttp.MethodPost) {
			s.chat(ctx)
		}
	case "/v1/completions":
		if s.method(ctx, fasthttp.MethodPost) {
			s.completions(ctx)
		}
	case "/v1/embeddings":
		if s.method(ctx, fasthttp.MethodPost) {
			s.embeddings(ctx)
		}
	case "/v1/responses", "/openai/v1/responses": // OpenAI, Azure (responses.go)
		if s.method(ctx, fasthttp.MethodPost) {
			s.responses(ctx)
		}
	case "/v1/models":
		if s.method(ctx, fasthttp.MethodGet) {
			ctx.SetContentType(contentJSON)
			ctx.SetBody(s.models)
		}
	case "/stats":
		if s.method(ctx, fasthttp.MethodGet) {
			s.writeStats(ctx)
		}
	case "/stats/reset":
		if s.method(ctx, fasthttp.MethodPost) {
			s.ResetStats()
			s.writeStats(ctx)
		}
	case "/v1/messages":
		// Anthropic Messages API (anthropic.go).
		if s.method(ctx, fasthttp.MethodPost) {
			s.anthropicMessages(ctx)
		}
	case "/v1/messages/count_tokens":
		if s.method(ctx, fasthttp.MethodPost) {
			s.anthropicCountTokens(ctx)
		}
	default:
		if s.serveLedger(ctx, path) || s.routeOther(ctx, path) || s.routePassthrough(ctx, path) {
			return
		}
		id, ok := modelID(path)
		if !ok {
			writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown path", "", "unknown_url")
			return
		}
		if s.method(ctx, fasthttp.MethodGet) {
			s.model(ctx, id)
		}
	}
}

// method answers 405 unless the request uses m.
func (s *Server) method(ctx *fasthttp.RequestCtx, m string) bool {
	if string(ctx.Method()) == m {
		return true
	}
	ctx.Response.Header.Set(fasthttp.HeaderAllow, m)
	writeError(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method not allowed", "", "method_not_allowed")
	return false
}

func (s *Server) writeStats(ctx *fasthttp.RequestCtx) {
	body, err := json.Marshal(s.Stats())
	if err != nil { // cannot happen: Stats holds only integers
		writeError(ctx, fasthttp.StatusInternalServerError, "server_error", "encode stats", "", "")
		return
	}
	ctx.SetContentType(contentJSON)
	ctx.SetBody(body)
}

// prelude runs the steps shared by every generated answer: it waits the
// latency and answers an injected status. It reports whether the caller
// should go on answering.
func (s *Server) prelude(ctx *fasthttp.RequestCtx, b *behaviour, timer *time.Timer) bool {
	s.wait(timer, b.latency)
	if b.status == 0 {
		return true
	}
	s.stats.failuresInjected.Add(1)
	if b.status == fasthttp.StatusTooManyRequests || b.status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
	}
	typ, code := statusError(b.status)
	writeError(ctx, b.status, typ, "mock: injected error status", "", code)
	return false
}

// wait sleeps d on timer, or less if the server is shutting down.
func (s *Server) wait(timer *time.Timer, d time.Duration) {
	if d <= 0 {
		return
	}
	timer.Reset(d)
	select {
	case <-timer.C:
	case <-s.stop:
		timer.Stop()
	}
}

// newID returns a unique response id: a bijection of a counter, so ids never
// repeat within one server.
func (s *Server) newID() uint64 {
	return s.seed ^ (s.ids.Add(1) * 0xbf58476d1ce4e5b9)
}

func (s *Server) getScratch() *scratch { return s.scratch.Get().(*scratch) }

func (s *Server) putScratch(sc *scratch) {
	if cap(sc.buf) > 1<<20 { // keep huge embedding answers from pinning memory
		sc.buf = nil
	}
	s.scratch.Put(sc)
}

func newStoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// fasthttpLogger routes the HTTP server's messages (such as a connection
// closed mid-answer) to slog at debug level.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("http server", "msg", fmt.Sprintf(format, args...))
	}
}

// errCut ends a stream body cut on purpose.
var errCut = errors.New("mock: stream cut on purpose")
