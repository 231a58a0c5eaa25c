package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/respcache"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/tollgate/tollgate/pkg/sse"
	"github.com/valyala/fasthttp"
)

// StatusClientClosed is recorded for requests whose client went away before
// the answer was complete (nginx's 499). It is never sent.
const StatusClientClosed = 499

// errClientGone discards an upstream connection the client watch closed.
var errClientGone = errors.New("client closed the connection")

// maxEventSize bounds one upstream SSE event.
const maxEventSize = 8 << 20

// relay streams an upstream SSE body to the client. It is the response
// body stream, which fasthttp writes through WriteTo: the events read so
// far go out and are flushed as one HTTP chunk before the upstream
// connection next reads its socket, so no event waits for the provider.
// A failed write to the client closes the relay, which closes the upstream
// connection at once.
type relay struct {
	g       *Gateway
	resp    *fasthttp.Response
	body    io.Reader
	conn    *trackedConn
	sc      *sse.Reader      // pooled SSE framing
	fr      providers.Framer // sc, or the provider's own framing
	stream  providers.Stream
	enc     encoder // OpenAI events to the client's format (encoder.go), or nil
	tmp     []byte  // OpenAI events before enc
	out     []byte  // output not yet handed to fasthttp: out[pos:]
	pos     int
	scratch []byte
	content []byte // delivered content, for token estimation
	// rec is the request's record. Until commit (commitStream) the relay
	// only reads its fields set before the first call (start, endpoint,
	// anthropic, requestID), and a hedge leg's relay shares it with the
	// request's goroutine; from commit on the relay owns it and finishes
	// the request with it. What the relay learns before commit is kept in
	// its own fields (rt, ttft, errType).
	rec      *record
	rt       *route        // the target this stream comes from
	ttft     time.Duration // time from the request's start to the first output
	errType  string        // why the stream failed, for the usage event
	upStart  time.Time
	idle     time.Duration
	deadline time.Time // the call's total deadline

	track   bool      // collect delivered content for estimation
	primed  bool      // the first event arrived; per-read idle deadlines apply
	done    bool      // no more upstream reads
	ended   bool      // the upstream stream ended (its terminator, a failure, or its end)
	failure *apiError // why the stream ended early; sent as an SSE error event
	closed  bool

	attempt *router.Attempt // reported to the router when the stream ends; nil outside routing
	plan    *router.Plan

	cached *respcache.Entry // events stored in the response cache, or nil

	watch clientWatch // registered while the stream is written

	// w is the client writer while WriteTo runs (flush writes to it),
	// written the bytes written so far, werr a failed write's error.
	w       io.Writer
	written int64
	werr    error
	flushAt int         // pending output is written once it reaches this
	gone    atomic.Bool // the client closed its connection (seen by watch)
	// finished: the answer had its finish reason (Stream.Complete); a
	// client that leaves from then on does not cut the upstream call, so
	// that the usage that follows is read (readTail).
	finished atomic.Bool

	// client is the client connection; each write to it must complete
	// within writeTimeout (config write_timeout), so a client that stops
	// reading is disconnected instead of holding the stream forever.
	client       net.Conn
	writeTimeout time.Duration

	// relayed counts the events that carried output, for the journal's
	// progress reports (begun.go), sent at nextProgress at the earliest;
	// journal is nil when no begun record was written.
	relayed      uint64
	nextProgress time.Time
	journal      journal
}

// relayBuf is the initial size of a relay's SSE and output buffers. A
// held stream keeps both for its whole life, and a chat chunk is a few
// hundred bytes; each grows (and stays grown in the pool) when a burst or a
// large event needs more. The upstream connection's own read buffer
// (upstreamReadBuf) sits below, so a small buffer here costs copies, not
// reads from the socket.
const relayBuf = 2 << 10

var relayPool = sync.Pool{New: func() any {
	return &relay{sc: sse.NewReader(nil, relayBuf, maxEventSize), out: make([]byte, 0, relayBuf)}
}}

func (g *Gateway) newRelay(resp *fasthttp.Response, rt *route, rec *record, upStart time.Time, s providers.Stream, enc encoder) *relay {
	r := relayPool.Get().(*relay)
	if !rec.held { // a hedge leg's relay: tryHedged set it before the legs ran
		rec.held = true
	}
	r.g, r.resp, r.rec, r.rt, r.upStart = g, resp, rec, rt, upStart
	r.body = resp.BodyStream()
	r.conn = connOf(resp)
	r.stream, r.enc = s, enc
	// The prompt is estimated from rec.body, the client's request (or
	// its translation), which stays valid until the stream is written:
	// fasthttp resets a request only after its response.
	r.track = g.acct.Estimator != nil && g.acct.Publisher != nil
	if r.fr = r.stream.Framer(r.body); r.fr == nil {
		r.sc.Reset(r.body)
		r.fr = r.sc
	}
	if rec.begun.EventID != "" {
		r.journal = g.acct.Journal
	}
	r.idle = rt.up.timeouts.Idle
	r.deadline = rec.start.Add(rt.up.timeouts.Total)
	return r
}

// prime reads until the first event is ready to go out. An error up to then
// is returned for a plain HTTP answer.
func (r *relay) prime() *apiError {
	for len(r.out) == 0 && !r.done {
		r.pump()
	}
	if r.failure != nil && len(r.out) == 0 {
		return r.failure
	}
	r.primed = true
	return nil
}

// Read implements io.Reader; fasthttp itself writes a stream through
// WriteTo. Both hand out the events buffered so far and arm the client
// write deadline before that output is written.
func (r *relay) Read(p []byte) (int, error) {
	b, err := r.next()
	r.armWrite()
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	r.pos += n
	return n, nil
}

// SupportsBodyWriteTo lets fasthttp's chunked body writer call WriteTo
// instead of Read: WriteTo does exactly what Read does, without fasthttp's
// 4 KiB copy buffer, which a held stream would keep for its whole life.
func (r *relay) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the stream to w (fasthttp's chunk writer, which writes
// and flushes one HTTP chunk per call). The events are written when the
// relay is about to wait for more: before each read from the upstream
// socket (beforeRead, called by the connection), so all the events
// that one socket read brought in go out in one write, and none is held
// while the upstream is waited for. Without a tracked connection each
// batch of events read goes out before the next read. The first events
// go out as soon as WriteTo starts, and pending output is written once it
// reaches flushAt (flushMin, doubling with each write up to flushMax), so a
// burst is not held back whole. The client write deadline bounds each
// write.
func (r *relay) WriteTo(w io.Writer) (int64, error) {
	if r.conn != nil {
		r.w, r.conn.hook, r.flushAt = w, r, flushMin
		defer r.unhook()
		// The first events (prime read them) go out at once.
		if err := r.flush(); err != nil {
			return r.written, err
		}
	}
	for {
		b, err := r.next()
		if r.werr != nil {
			return r.written, r.werr
		}
		r.armWrite()
		if errors.Is(err, io.EOF) {
			return r.written, nil
		}
		if err != nil {
			return r.written, err
		}
		if err := r.write(w, b); err != nil {
			return r.written, err
		}
	}
}

// write writes b, output not yet written, to w.
func (r *relay) write(w io.Writer, b []byte) error {
	n, err := w.Write(b)
	r.pos += n
	r.written += int64(n)
	return err
}

// beforeRead runs on the upstream connection before each read from its
// socket while WriteTo runs: it writes the pending output, then bounds
// the read by the idle timeout (not during drain, which sets its own). A
// failed write aborts the read, and WriteTo returns the write's error.
func (r *relay) beforeRead() error {
	if err := r.flush(); err != nil {
		return err
	}
	if !r.done {
		r.armRead()
	}
	return nil
}

// armRead bounds the next upstream read by the idle timeout, and by the
// call's total deadline when that comes first; by usageTail once the
// client has left.
func (r *relay) armRead() {
	now := time.Now()
	d := now.Add(r.idle)
	if r.gone.Load() {
		d = now.Add(min(r.idle, usageTail))
	}
	if r.deadline.Before(d) {
		d = r.deadline
	}
	_ = r.conn.SetReadDeadline(d)
}

// usageTail bounds how long the upstream is read for the usage of an
// answer whose client left after its finish reason (readTail).
const usageTail = 2 * time.Second

// flush writes the pending output. A failed write ends the relay:
// WriteTo returns the write's error.
func (r *relay) flush() error {
	if r.pos == len(r.out) {
		return nil
	}
	r.armWrite()
	if err := r.write(r.w, r.out[r.pos:]); err != nil {
		r.werr = err
		return err
	}
	r.out, r.pos = r.out[:0], 0
	r.flushAt = min(2*r.flushAt, flushMax)
	return nil
}

// flushMin and flushMax bound how much output a relay gathers before it
// writes: from flushMin (a few chat chunks, so the first tokens of a
// burst are not held back by the rest) doubling with each write to
// flushMax (about twenty chunks; a relay's output buffer, kept in its
// pool, stays about that size).
const (
	flushMin = 512
	flushMax = 4 << 10
)

// unhook ends the work before reads when WriteTo returns.
func (r *relay) unhook() {
	r.conn.hook, r.w = nil, nil
}

// armWrite bounds the client write that follows by write_timeout, so a
// client that stops reading is disconnected.
func (r *relay) armWrite() {
	if r.client != nil && r.writeTimeout > 0 {
		_ = r.client.SetWriteDeadline(time.Now().Add(r.writeTimeout))
	}
}

// next returns the output not yet written, pumping the upstream until some
// is ready, or io.EOF after the last event (and a failure's error event).
// While WriteTo runs, it pumps to the end of the stream: flush writes the
// output on the way.
func (r *relay) next() ([]byte, error) {
	for {
		if r.pos < len(r.out) && (r.w == nil || r.done) {
			return r.out[r.pos:], nil
		}
		if r.done {
			if r.failure == nil {
				return nil, io.EOF
			}
			switch {
			case r.enc != nil:
				r.out = r.enc.fail(r.out[:0], r.failure)
			case r.rec.anthropic:
				r.out = appendAnthropicErrorEvent(r.out[:0], r.failure)
			case r.rec.endpoint == epResponses:
				r.out = appendResponsesErrorEvent(r.out[:0], r.failure, r.stream)
			default:
				r.out = appendErrorEvent(r.out[:0], r.failure)
			}
			r.pos = 0
			r.failure = nil
			continue
		}
		if r.pos == len(r.out) {
			r.out, r.pos = r.out[:0], 0
		}
		r.pump()
	}
}

// pump turns the buffered events into output; when none is buffered it
// reads once more from upstream.
func (r *relay) pump() {
	for !r.done {
		ev, ok := r.fr.Next()
		if !ok {
			break
		}
		r.handleEvent(ev)
		if r.w != nil && len(r.out)-r.pos >= r.flushAt && r.flush() != nil {
			r.done = true // the client write failed; WriteTo reports it
			return
		}
	}
	if r.done || len(r.out) > 0 && r.w == nil {
		// With a writer (WriteTo), reading goes on: the output is written
		// before the connection next reads its socket.
		return
	}
	if r.primed && r.conn != nil && r.w == nil {
		// While WriteTo runs, beforeRead arms it, only before the reads
		// that wait for the socket.
		r.armRead()
	}
	if err := r.fr.Fill(); err != nil {
		if r.werr != nil {
			r.done = true // the client write failed; WriteTo reports it
			return
		}
		r.upstreamEnded(err)
	}
}

// handleEvent translates one upstream event and queues the result.
func (r *relay) handleEvent(ev []byte) {
	n := len(r.out)
	var st providers.State
	var err error
	if r.enc == nil {
		r.out, st, err = r.stream.Event(r.out, ev)
		switch {
		case !r.track || len(r.out) == n:
		case r.rec.endpoint == epResponses:
			r.content = appendResponsesContent(r.content, r.out[n:])
		default:
			r.content = r.appendContent(r.out[n:])
		}
	} else {
		r.tmp, st, err = r.stream.Event(r.tmp[:0], ev)
		if r.track {
			r.content = r.appendContent(r.tmp)
		}
		var eerr error
		if r.out, eerr = r.enc.Events(r.out, r.tmp); eerr != nil && st != providers.Failed {
			st, err = providers.Failed, eerr
		}
	}
	if len(r.out) > n {
		if r.ttft == 0 {
			r.ttft = time.Since(r.rec.start)
		}
		r.relayed++
		if r.journal != nil {
			r.progress(time.Now())
		}
	}
	if !r.finished.Load() && r.stream.Complete() {
		r.finished.Store(true)
	}
	if r.cached != nil && len(r.out) > n && st != providers.Failed {
		r.cached.AppendEvent(r.out[n:])
	}
	switch st {
	case providers.Done:
		r.done, r.ended = true, true
		r.drain()
	case providers.Failed:
		r.fail(r.eventError(err))
		if r.rec.endpoint == epResponses && r.enc == nil && len(r.out) > n {
			// The provider's own terminal event (response.failed) went out:
			// the stream ends there, recorded as failed, with nothing added.
			r.failure = nil
		}
	}
}

// eventError describes a failed stream event for the client.
func (r *relay) eventError(err error) *apiError {
	name := r.rt.up.name
	var ue *providers.UpstreamError
	switch {
	case errors.As(err, &ue):
		msg := r.rt.up.scrub(truncate(ue.Message, 1024))
		return &apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: "upstream_error",
			Message: fmt.Sprintf("provider %s failed mid-stream: %s", name, msg)}
	default:
		return &apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: codeUpstreamBad,
			Message: fmt.Sprintf("provider %s sent a malformed stream event", name)}
	}
}

// upstreamEnded handles the end of the upstream body before [DONE].
func (r *relay) upstreamEnded(err error) {
	r.ended = true
	if r.gone.Load() {
		// We closed the upstream because the client left: nobody to tell.
		r.done = true
		return
	}
	name := r.rt.up.name
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF) && r.stream.Complete():
		// finish_reason without [DONE]: the answer is complete.
		r.done = true
		if r.enc != nil && !r.enc.Closed() {
			r.out = r.enc.Finish(r.out)
		}
	case errors.Is(err, providers.ErrMalformed):
		r.fail(&apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: codeUpstreamBad,
			Message: fmt.Sprintf("provider %s sent a malformed stream frame", name)})
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		// A non-SSE tail is garbage; a partial binary frame is a cut.
		if r.fr == providers.Framer(r.sc) && len(r.fr.Buffered()) > 0 && !looksLikeEvent(r.fr.Buffered()) {
			r.fail(&apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: codeUpstreamBad,
				Message: fmt.Sprintf("provider %s sent a malformed stream event", name)})
			return
		}
		r.fail(&apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: "upstream_stream_cut",
			Message: fmt.Sprintf("provider %s ended the stream before it was complete", name)})
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &ne) && ne.Timeout():
		what := "sent nothing for " + r.idle.String()
		if !r.primed {
			what = "did not start the stream in time"
		} else if !time.Now().Before(r.deadline) {
			what = "exceeded the total timeout"
		}
		r.fail(&apiError{Status: fiber.StatusGatewayTimeout, Type: typeTimeout, Code: "upstream_timeout",
			Message: fmt.Sprintf("provider %s %s", name, what)})
	case errors.Is(err, sse.ErrEventTooLarge):
		r.fail(&apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: codeUpstreamBad,
			Message: fmt.Sprintf("provider %s sent a stream event over %d bytes", name, maxEventSize)})
	default:
		r.fail(&apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: "upstream_error",
			Message: fmt.Sprintf("provider %s stream broke: %s", name, r.rt.up.scrub(err.Error()))})
	}
}

// looksLikeEvent reports whether an unterminated tail is the start of an SSE
// event (a field line) rather than bytes that are not SSE at all.
func looksLikeEvent(b []byte) bool {
	return bytes.HasPrefix(b, []byte("data:")) || bytes.HasPrefix(b, []byte("event:")) ||
		bytes.HasPrefix(b, []byte(":")) || bytes.HasPrefix(b, []byte("id:")) || bytes.HasPrefix(b, []byte("retry:"))
}

func (r *relay) fail(e *apiError) {
	r.failure = e
	r.done, r.ended = true, true
	r.errType = e.Code
}

// readTail reads the rest of an upstream stream whose client left after
// the answer's finish reason, for the usage chunk that follows it (issue
// #41: the answer was delivered whole, and billing it from an estimate
// undercounts what the provider bills, reasoning tokens above all).
// Nothing goes to the client. The read ends at the stream's end, or
// usageTail from now, or the call's deadline, whichever comes first; the
// connection is then discarded (release).
func (r *relay) readTail() {
	if r.ended || r.failure != nil || r.conn == nil || !r.finished.Load() || r.stream.Usage().Reported {
		return
	}
	r.gone.Store(true) // the connection is not reused after a cut read
	_ = r.conn.SetReadDeadline(minTime(time.Now().Add(min(r.idle, usageTail)), r.deadline))
	for {
		for ev, ok := r.fr.Next(); ok; ev, ok = r.fr.Next() {
			var st providers.State
			r.tmp, st, _ = r.stream.Event(r.tmp[:0], ev)
			if st != providers.More {
				return
			}
		}
		if r.fr.Fill() != nil {
			return
		}
	}
}

// drain reads the rest of the upstream body after [DONE] (normally just the
// end of the chunked encoding) so the connection can be reused.
func (r *relay) drain() {
	if r.conn != nil {
		_ = r.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	}
	var buf [256]byte
	for i := 0; i < 4; i++ {
		if _, err := r.body.Read(buf[:]); err != nil {
			return
		}
	}
}

// CloseWithError is called by fasthttp when the response is written (err
// nil) or the client connection failed (err set). It closes the upstream
// body: an unfinished one closes the connection, which cancels the call.
func (r *relay) CloseWithError(err error) error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.watch.stop()
	r.rec.ttft = r.ttft
	if r.errType != "" {
		r.rec.errType = r.errType
	}
	if err != nil || r.gone.Load() {
		r.readTail() // the client left: the usage after the finish reason is still read
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		r.rec.clientAborted = true
		r.rec.status = StatusClientClosed
		r.rec.errType = "client_write_timeout"
		r.g.log.Warn("client stopped reading the stream; disconnected", "request_id", r.rec.requestID, "write_timeout", r.writeTimeout)
	case r.finished.Load() && r.errType == "" && r.stream.Usage().Reported:
		// The client left after the whole answer, and the provider's
		// usage was read: the request is complete, as the provider bills it.
		if r.rec.status == 0 {
			r.rec.status = fiber.StatusOK
		}
	case err != nil || !r.done || r.gone.Load():
		r.rec.clientAborted = true
		r.rec.status = StatusClientClosed
	case r.rec.status == 0:
		r.rec.status = fiber.StatusOK
	}
	r.rec.upstream += time.Since(r.upStart)
	r.rec.usage = r.stream.Usage()
	if r.cached != nil && r.rec.errType == "" && !r.rec.clientAborted && err == nil && r.done {
		u := r.rec.usage
		r.cached.Usage = respcache.Usage{Prompt: u.Prompt, Completion: u.Completion, Cached: u.Cached, Reasoning: u.Reasoning}
		r.cached.Model, r.cached.Provider = r.rt.upstreamModel, r.rt.up.name
		r.g.cache.Put(r.rec.cache.key, r.rec.cache.ttl, r.cached)
	}
	r.cached = nil
	if r.attempt != nil {
		o := router.Outcome{Class: router.Success}
		switch {
		case r.rec.clientAborted:
			o.Class = router.Canceled
		case r.rec.errType == "upstream_timeout":
			o.Class = router.Timeout
		case r.rec.errType != "":
			o.Class = router.ServerError
		}
		// The router's latency sample is this call's own time to first
		// token, not the request's (earlier calls, a hedge's delay).
		ttft := r.ttft
		if ttft > 0 {
			ttft = max(ttft-r.upStart.Sub(r.rec.start), time.Microsecond)
		}
		r.attempt.Done(o, ttft)
		r.rec.fallbacks = r.plan.Fallbacks()
		r.plan.Release()
	}
	r.rec.delivered = r.content
	r.g.finish(r.rec)
	r.release()
	return nil
}

// clientGone runs on the watcher's goroutine when the client has closed its
// connection: closing the upstream connection cancels the call at once and
// wakes the relay from its read. After the answer's finish reason there is
// nothing left to cancel but the usage that follows it: the relay reads
// on, for usageTail at most, and bills that usage instead of an estimate.
func (r *relay) clientGone() {
	r.gone.Store(true)
	if r.conn == nil {
		return
	}
	if r.finished.Load() {
		_ = r.conn.SetReadDeadline(minTime(time.Now().Add(min(r.idle, usageTail)), r.deadline))
		r.g.log.Debug("client left after the answer's finish reason; reading the provider's usage", "request_id", r.rec.requestID)
		return
	}
	_ = r.conn.Close()
}

// release closes the upstream body and returns the relay to its pool.
func (r *relay) release() {
	if r.gone.Load() {
		// The watch may have closed the upstream connection after the body
		// was fully read: discard it rather than return it to the pool.
		if c, ok := r.body.(interface{ CloseWithError(error) error }); ok {
			_ = c.CloseWithError(errClientGone)
		}
	}
	_ = r.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(r.resp)
	r.stream.Close()
	if r.enc != nil {
		r.enc.Release()
	}
	r.sc.Reset(nil)
	*r = relay{sc: r.sc, out: r.out[:0], scratch: r.scratch[:0], content: r.content[:0], tmp: r.tmp[:0]}
	relayPool.Put(r)
}

// maxDelivered bounds the content kept for estimating a stream's tokens.
const maxDelivered = 1 << 20

// appendContent adds the text the stream's last event delivered (OpenAI
// format events evs) to r.content: as the stream read it when it can say,
// else parsed from evs.
func (r *relay) appendContent(evs []byte) []byte {
	if cs, ok := r.stream.(providers.ContentStream); ok {
		if len(r.content) >= maxDelivered {
			return r.content
		}
		return append(r.content, cs.LastContent()...)
	}
	return appendContent(r.content, evs)
}

// appendContent appends the delta content of OpenAI chunk events in evs to
// dst (as raw JSON string text, which tokenizes close to the text itself).
func appendContent(dst, evs []byte) []byte {
	for len(evs) > 0 && len(dst) < maxDelivered {
		i := bytes.Index(evs, []byte("\n\n"))
		ev := evs
		if i >= 0 {
			ev, evs = evs[:i], evs[i+2:]
		} else {
			evs = nil
		}
		d, ok := bytes.CutPrefix(ev, []byte("data: "))
		if !ok || len(d) == 0 || d[0] != '{' {
			continue
		}
		if v := gjson.Get(unsafeString(d), "choices.0.delta.content"); v.Type == gjson.String && len(v.Raw) > 2 {
			dst = append(dst, v.Raw[1:len(v.Raw)-1]...)
		}
	}
	return dst
}

// appendErrorEvent writes e as an OpenAI-style stream error event.
func appendErrorEvent(b []byte, e *apiError) []byte {
	b = append(b, "data: "...)
	b = append(b, e.body()...)
	return append(b, "\n\n"...)
}
