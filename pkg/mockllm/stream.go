package mockllm

import (
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// streamer writes the events of one streamed answer in a wire format. Each
// method appends one event (one SSE message) to dst, except that a content
// chunk of a tool-call answer may come with the events that open or close
// a call before it. A stream is: head events, content chunks (one word, or
// one fragment of tool-call arguments, each), then either the tail events
// (finish, usage, terminator) or an injected interruption.
type streamer interface {
	// prepare precomputes per-stream state, such as st.pre.
	prepare(st *stream)
	// headEvents is the number of events before the first content chunk.
	headEvents(st *stream) int
	appendHead(dst []byte, st *stream, i int) []byte
	// appendContent appends content chunk i; last marks the chunk that
	// must carry the finish reason.
	appendContent(dst []byte, st *stream, i int, last bool) []byte
	// tailEvents is the number of events after a normal content phase.
	tailEvents(st *stream) int
	appendTail(dst []byte, st *stream, i int) []byte
	// appendError appends a mid-stream error event.
	appendError(dst []byte, st *stream) []byte
}

// answer is what a generated response says, shared by non-stream and
// stream writers. model is a raw JSON string token, quotes included.
type answer struct {
	id      uint64
	created int64
	model   string
	calls   []call // tool calls (tools.go); none for a text answer
	mention []byte // text quoting a tool result, escaped (tools.go); nil: none
	prompt  int    // prompt tokens
	written int    // of them, written to the prompt cache (Anthropic cache_creation_input_tokens)
	words   int    // completion words of a non-stream answer
	usage   bool   // include usage
	fault   faults // faults.go: bad usage, error-event status
	tier    string // OpenAI formats: the service_tier reported with usage ("flex", "priority"); "": none

	// Responses API only (responses.go).
	incomplete bool // max_output_tokens cut the answer short
	cached     int  // input_tokens_details.cached_tokens
	reasoning  int  // output_tokens_details.reasoning_tokens
}

// streamEnd is how the content phase of a stream ends.
type streamEnd uint8

const (
	endNormal     streamEnd = iota // tail events: finish reason, usage, terminator
	endCut                         // close the connection
	endGarbage                     // a non-SSE line, then close the connection
	endErrorEvent                  // an error event, then end the body
)

// phase is a stream's position in its event sequence.
type phase uint8

const (
	phaseHead phase = iota
	phaseContent
	phaseTail
	phaseGarbage
	phaseErrorEvent
	phaseCut
	phaseDone
)

// eventKind tells Read what to do with an event from next.
type eventKind uint8

const (
	evData    eventKind = iota // write it
	evContent                  // write it; it carries one completion word
	evCut                      // close the connection abruptly
	evEnd                      // the body is complete
)

// garbageLine is what a garbage stream writes instead of an SSE event.
const garbageLine = "\x00\xff<<mock garbage: this line is not server-sent events>>\r\n"

// stream is the body of one streamed answer, read by fasthttp one event at
// a time (see Read). A client that went away shows as a failed write, after
// which fasthttp calls Close without reading to the end. Close accounts the
// stream in the server's counters and recycles it.
type stream struct {
	s      *Server
	conn   net.Conn
	format streamer
	a      answer

	chunks       int // planned content chunks
	stopAt       int // content chunks written before the end
	end          streamEnd
	includeUsage bool // send the usage chunk
	firstDelay   time.Duration
	chunkDelay   time.Duration

	phase       phase
	i           int  // index within the phase
	sent        int  // events produced
	seq         int  // Responses API events written (several may make one produced event)
	written     int  // content chunks written to the client
	unconfirmed bool // the last event handed out is a content chunk not yet counted
	done        bool // the planned sequence was written in full

	// items lays out a tool-call answer (tools.go): lead items go before
	// the first content chunk, trail after the last; cursor is the next.
	items               []planItem
	lead, trail, cursor int

	modelBuf []byte
	pre      []byte // per-stream event prefix a format may precompute
	buf      []byte
	pending  []byte // unread rest of the current event
	timer    *time.Timer
}

// newStream takes a stream from the pool and plans it from b and a.
func (s *Server) newStream(ctx *fasthttp.RequestCtx, f streamer, b *behaviour, a *answer, includeUsage bool) *stream {
	st := s.streams.Get().(*stream)
	st.s, st.conn, st.format = s, ctx.Conn(), f
	st.a = *a
	st.modelBuf = append(st.modelBuf[:0], a.model...)
	st.a.model = b2s(st.modelBuf)
	st.chunks, st.stopAt, st.end = b.chunks, b.chunks, endNormal
	switch {
	case b.garbage:
		st.end, st.stopAt = endGarbage, min(max(b.cutAfter, 0), b.chunks)
	case b.cutAfter >= 0:
		st.end, st.stopAt = endCut, min(b.cutAfter, b.chunks)
	case b.errorEventAfter >= 0:
		st.end, st.stopAt = endErrorEvent, min(b.errorEventAfter, b.chunks)
	}
	st.includeUsage = includeUsage && !b.noUsage
	st.firstDelay, st.chunkDelay = b.firstChunkDelay, b.chunkDelay
	st.phase, st.i, st.sent, st.written, st.done = phaseHead, 0, 0, 0, false
	st.seq = 0
	st.unconfirmed = false
	st.pending = nil
	st.items, st.lead, st.trail, st.cursor = st.items[:0], 0, 0, 0
	f.prepare(st)
	return st
}

// startStream sends the SSE header and hands st to fasthttp as the body.
func (s *Server) startStream(ctx *fasthttp.RequestCtx, st *stream) {
	s.stats.streamsStarted.Add(1)
	s.stats.promptTokens.Add(int64(st.a.prompt))
	if st.end != endNormal {
		s.stats.failuresInjected.Add(1)
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	ctx.Response.ImmediateHeaderFlush = true // the header must not wait for the first delay
	ctx.SetBodyStream(st, -1)
}

// next produces the next event into st.buf, waiting the configured delays.
func (st *stream) next() ([]byte, eventKind) {
	for {
		switch st.phase {
		case phaseHead:
			if st.i < st.format.headEvents(st) {
				st.pause(0)
				return st.emit(st.format.appendHead(st.buf[:0], st, st.i), evData)
			}
			st.phase, st.i = phaseContent, 0
		case phaseContent:
			if st.i < st.stopAt {
				st.pause(st.chunkDelay)
				last := st.end == endNormal && st.i == st.chunks-1
				return st.emit(st.format.appendContent(st.buf[:0], st, st.i, last), evContent)
			}
			st.i = 0
			switch st.end {
			case endCut:
				st.phase = phaseCut
			case endGarbage:
				st.phase = phaseGarbage
			case endErrorEvent:
				st.phase = phaseErrorEvent
			default:
				st.phase = phaseTail
			}
		case phaseTail:
			if st.i < st.format.tailEvents(st) {
				st.pause(0)
				return st.emit(st.format.appendTail(st.buf[:0], st, st.i), evData)
			}
			st.phase = phaseDone
		case phaseGarbage:
			st.phase = phaseCut
			return st.emit(append(st.buf[:0], garbageLine...), evData)
		case phaseErrorEvent:
			st.phase = phaseDone
			return st.emit(st.format.appendError(st.buf[:0], st), evData)
		case phaseCut:
			return nil, evCut
		default:
			return nil, evEnd
		}
	}
}

// emit records an event produced by next.
func (st *stream) emit(ev []byte, k eventKind) ([]byte, eventKind) {
	st.buf = ev
	st.i++
	st.sent++
	return ev, k
}

// pause waits before an event: the first-chunk delay before the first
// event, d before content chunks after the first.
func (st *stream) pause(d time.Duration) {
	switch {
	case st.sent == 0:
		st.s.wait(st.timer, st.firstDelay)
	case st.phase == phaseContent && st.i > 0:
		st.s.wait(st.timer, d)
	}
}

// Read hands out one event per call (or the rest of one, when p is
// short). fasthttp writes each Read as one HTTP chunk and flushes it, so
// every event reaches the client at once, and it reads again only once that
// write succeeded: a content chunk counts as written at the next Read.
func (st *stream) Read(p []byte) (int, error) {
	if len(st.pending) == 0 {
		if st.unconfirmed {
			st.written++
			st.unconfirmed = false
		}
		ev, k := st.next()
		switch k {
		case evEnd:
			st.done = true
			return 0, io.EOF
		case evCut:
			st.done = true
			return 0, st.cut()
		}
		st.pending = ev
		st.unconfirmed = k == evContent
	}
	n := copy(p, st.pending)
	st.pending = st.pending[n:]
	return n, nil
}

// cut closes the client connection without ending the chunked body, so the
// client sees the stream stop mid-way.
func (st *stream) cut() error {
	if st.conn != nil {
		_ = st.conn.Close()
	}
	return errCut
}

// Close accounts the stream and returns it to the pool. fasthttp calls it
// once the body is written or its writing failed.
func (st *stream) Close() error {
	s := st.s
	if s == nil {
		return nil // already closed
	}
	s.stats.completionTokens.Add(int64(st.written))
	switch {
	case !st.done:
		s.stats.streamsCancelled.Add(1)
		s.ledger.incomplete()
	case st.end == endNormal:
		s.stats.streamsCompleted.Add(1)
		s.ledger.served(st.a.model, st.a.prompt, st.written+st.a.reasoning, st.includeUsage && !st.a.fault.badUsage)
	default:
		s.ledger.incomplete()
	}
	st.s, st.conn, st.format = nil, nil, nil
	st.a = answer{}
	st.pending = nil
	if cap(st.buf) > 64<<10 {
		st.buf = nil
	}
	s.streams.Put(st)
	return nil
}
