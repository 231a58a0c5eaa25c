package gateway

// Hedged requests (models[].hedge.after). When a call has not produced its
// first byte within the threshold (a stream's first event; a non-stream
// call's answer), the same request goes to the next target of the route and
// the first of the two to answer serves it. The other is cancelled at once:
// its upstream connection is closed, never pooled, so the provider stops
// generating, and the router records it as Canceled (no failure). Only the
// winner is billed: the request keeps its one usage event.
//
// fasthttp's HostClient has no context: a caller cannot abandon a call that
// waits for its answer. So each call of a hedged request runs in its own
// goroutine (a leg) and goes through the upstream's legTransport, which
// binds the pooled connection the call acquires to the leg. Cancelling the
// leg closes that connection, which ends the call wherever it is (writing,
// waiting for the header, reading the first event). A leg never touches the
// client's request or response: it works on its own copy of the body, so it
// may finish after the handler returned; it then cleans up after itself.

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/valyala/fasthttp"
)

// headerHedged is "true" on answers to hedged requests and "false" on the
// other answers of models with hedging on; /v1/messages, which does not
// hedge, never sets it.
const headerHedged = "x-tollgate-hedged"

// errHedgeLost ends a leg that was cancelled before it had a connection.
var errHedgeLost = errors.New("hedged call cancelled: the other call answered first")

// legTransport is every upstream's fasthttp RoundTripper. A call that is not
// hedged goes to fasthttp's own transport after one atomic load; a hedged
// call (registered by its leg) runs leg.roundTrip, which binds its
// connection to the leg.
type legTransport struct {
	n    atomic.Int32 // registered legs
	mu   sync.Mutex
	legs map[*fasthttp.Request]*leg // guarded by mu
}

func (t *legTransport) add(req *fasthttp.Request, l *leg) {
	t.mu.Lock()
	if t.legs == nil {
		t.legs = make(map[*fasthttp.Request]*leg)
	}
	t.legs[req] = l
	t.n.Add(1)
	t.mu.Unlock()
}

func (t *legTransport) remove(req *fasthttp.Request) {
	t.mu.Lock()
	delete(t.legs, req)
	t.n.Add(-1)
	t.mu.Unlock()
}

// RoundTrip implements fasthttp.RoundTripper.
func (t *legTransport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	if t.n.Load() > 0 {
		t.mu.Lock()
		l := t.legs[req]
		t.mu.Unlock()
		if l != nil {
			return l.roundTrip(hc, req, resp)
		}
	}
	return fasthttp.DefaultTransport.RoundTrip(hc, req, resp)
}

// leg is one call of a hedged request, run by runLeg on its own goroutine.
type leg struct {
	a        *router.Attempt
	rt       *route
	req      *fasthttp.Request
	call     providers.Call
	rec      *record          // the request's; the leg reads only what was set before its call
	s        providers.Stream // a stream's decoder until openStream takes it; nil for non-stream
	span     tracing.Span
	start    time.Time
	end      time.Time // the answer (non-stream) or first event (stream) arrived
	deadline time.Time

	// Results, written by the leg before it reports and read by the owner
	// after; on failure only res is set.
	resp  *fasthttp.Response // non-stream: a 200 answer
	relay *relay             // stream: primed with its first event
	res   attemptResult

	settled bool // owner's view: reported or cancelled

	mu   sync.Mutex
	conn net.Conn // guarded by mu: the connection the call uses; cancel closes it
	lost bool     // guarded by mu: cancelled
	sent bool     // guarded by mu: reported; the owner now owns the results
}

// bind records the connection the leg's call uses; false when the leg was
// cancelled already.
func (l *leg) bind(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return false
	}
	l.conn = c
	return true
}

// unbind forgets the connection (it is about to be pooled or closed);
// false when the leg was cancelled, so the connection must be closed.
func (l *leg) unbind() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conn = nil
	return !l.lost
}

func (l *leg) isLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// cancel ends the leg at once by closing its connection. It reports
// whether the leg had reported already: its results are then in the
// channel, for the owner to discard.
func (l *leg) cancel() (sent bool) {
	l.mu.Lock()
	l.lost = true
	c := l.conn
	l.conn = nil
	sent = l.sent
	l.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	return sent
}

// ok reports whether the leg answered: a 200 answer or a primed stream.
func (l *leg) ok() bool { return l.resp != nil || l.relay != nil }

// discard releases what a losing leg holds; a primed stream's connection
// is closed (the leg is lost, so its body does not pool it).
func (l *leg) discard() {
	if l.relay != nil {
		l.relay.release()
		l.relay = nil
	}
	if l.resp != nil {
		fasthttp.ReleaseResponse(l.resp)
		l.resp = nil
	}
}

// roundTrip is fasthttp's transport for one hedged call, with the
// connection bound to the leg from acquisition until it is pooled or
// closed. It follows fasthttp's own transport: the same deadlines, pooling
// and retry answers (the stale keep-alive retry still applies).
func (l *leg) roundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	cc, err := hc.AcquireConn(time.Until(l.deadline), req.ConnectionClose())
	if err != nil {
		return false, err
	}
	conn := cc.Conn()
	if !l.bind(conn) {
		hc.ReleaseConn(cc) // unused: still good
		return false, errHedgeLost
	}
	closeReq := req.ConnectionClose()
	release := func(discard bool) {
		if l.unbind() && !discard && !closeReq {
			hc.ReleaseConn(cc)
			return
		}
		hc.CloseConn(cc)
	}
	resp.ParseNetConn(conn)
	if err := conn.SetDeadline(l.deadline); err != nil {
		release(true)
		return true, err
	}
	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err != nil {
		release(true)
		return !l.isLost(), err
	}
	br := hc.AcquireReader(conn)
	if !resp.StreamBody {
		err = resp.ReadLimitBody(br, hc.MaxResponseBodySize)
		hc.ReleaseReader(br)
		if err != nil {
			release(true)
			return !errors.Is(err, fasthttp.ErrBodyTooLarge) && !l.isLost(), err
		}
		release(resp.ConnectionClose())
		return false, nil
	}
	// A stream: fasthttp's body reader on a response of our own, wrapped
	// so that closing the body pools or closes the connection.
	head := fasthttp.AcquireResponse()
	head.StreamBody = true
	if err := head.ReadLimitBody(br, 0); err != nil {
		fasthttp.ReleaseResponse(head)
		hc.ReleaseReader(br)
		release(true)
		return !l.isLost(), err
	}
	head.Header.CopyTo(&resp.Header)
	keepAlive := !head.ConnectionClose()
	resp.SetBodyStream(&legBody{head: head, done: func(discard bool) {
		hc.ReleaseReader(br)
		release(discard || !keepAlive)
	}}, -1)
	return false, nil
}

// legBody is the body of a hedged stream. Closing it returns the
// connection to the pool when the body was read to its end (and nothing
// went wrong), else closes it.
type legBody struct {
	head   *fasthttp.Response // its body stream reads the connection
	done   func(discard bool)
	eof    bool
	closed bool
}

// Read implements io.Reader.
func (b *legBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errClientGone
	}
	n, err := b.head.BodyStream().Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// CloseWithError implements fasthttp.ReadCloserWithError.
func (b *legBody) CloseWithError(err error) error {
	if b.closed {
		return nil
	}
	b.closed = true
	_ = b.head.CloseBodyStream()
	fasthttp.ReleaseResponse(b.head)
	b.done(err != nil || !b.eof)
	return nil
}

// tryHedged makes the call a (req built from call) as the first leg of a
// hedged request: when it has not answered within after, a second call
// from plan.Hedge races it and the first to answer serves the request; the
// other is cancelled. Every attempt is reported to the router here, except
// a winning stream's, which its relay reports at the end.
func (g *Gateway) tryHedged(c *fiber.Ctx, st *state, plan *router.Plan, a *router.Attempt, req *fasthttp.Request,
	rt *route, rec *record, call *providers.Call, info *reqInfo, after time.Duration, span tracing.Span) attemptResult {
	// The legs may outlive the handler (a loser cleans up on its own), so
	// they use nothing of the client's: a copy of the body, and a request
	// that owns its body.
	body := append([]byte(nil), call.Body...)
	req.SetBody(req.Body())
	start := time.Now()
	out := make(chan *leg, 2) // never blocks a leg
	rec.held = true           // the legs hold it (the loser may outlive the request); set before either runs
	first := g.newLeg(a, rt, req, call, body, rec, info.stream, span)
	legs := [2]*leg{first}
	go g.runLeg(first, out)
	timer := time.NewTimer(after)
	defer timer.Stop()
	live := 1
	var last attemptResult
	for live > 0 {
		select {
		case <-timer.C:
			if h := g.startHedge(c, st, plan, rec, info, body); h != nil {
				legs[1] = h
				live++
				go g.runLeg(h, out)
			}
		case l := <-out:
			live--
			l.settled = true
			if l.ok() {
				return g.hedgeWon(c, plan, rec, legs, l, start, after, out)
			}
			l.res.outcome.RetryAfter = router.ParseRetryAfter(l.res.retryAfter, time.Now())
			l.a.Done(l.res.outcome, 0)
			l.span.SetStatus(l.res.aerr.Status, l.res.aerr.Code)
			l.span.End()
			last = l.res
		}
	}
	if legs[1] != nil {
		g.log.Debug("hedged request failed", "request_id", rec.requestID, "model", rec.model, "after", after,
			"first", first.rt.deployment, "second", legs[1].rt.deployment, "error", last.aerr.Code)
	}
	return last
}

// newLeg prepares a call of a hedged request.
func (g *Gateway) newLeg(a *router.Attempt, rt *route, req *fasthttp.Request, call *providers.Call, body []byte,
	rec *record, stream bool, span tracing.Span) *leg {
	l := &leg{a: a, rt: rt, req: req, call: *call, rec: rec, span: span, start: time.Now()}
	// Build ran; what the decoders still read must not be the client's.
	l.call.Body, l.call.Header, l.call.RequestID = body, nil, []byte(rec.requestID)
	l.call.ModelRaw, l.call.StreamOptionsRaw = "", ""
	t := rt.up.timeouts
	l.deadline = rec.start.Add(t.Total)
	if stream {
		l.s = rt.up.prov.Stream(&l.call)
		l.deadline = minTime(l.deadline, l.start.Add(t.FirstByte))
	}
	return l
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// runLeg makes the leg's call up to its answer (non-stream) or first event
// (stream) and reports it on out, unless the leg was cancelled meanwhile:
// then it releases what it holds itself.
func (g *Gateway) runLeg(l *leg, out chan<- *leg) {
	up := l.rt.up
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = l.s != nil
	up.legs.add(l.req, l)
	err := up.hc.DoDeadline(l.req, resp, l.deadline)
	up.legs.remove(l.req)
	fasthttp.ReleaseRequest(l.req)
	l.req = nil
	switch {
	case l.s != nil:
		l.relay, l.res = g.openStream(resp, err, l.rt, l.rec, l.start, l.s, nil)
		l.s = nil
	case err != nil:
		fasthttp.ReleaseResponse(resp)
		l.res = failed(up.classify(err), 0, err, nil, nil)
	case resp.StatusCode() != fasthttp.StatusOK:
		status := resp.StatusCode()
		ra := append([]byte(nil), resp.Header.Peek(fiber.HeaderRetryAfter)...)
		l.res = failed(up.statusError(status, resp.Body(), ra), status, nil, resp.Body(), ra)
		fasthttp.ReleaseResponse(resp)
	default:
		l.resp = resp
	}
	l.end = time.Now()
	l.mu.Lock()
	lost := l.lost
	l.sent = !lost
	l.mu.Unlock()
	if lost {
		l.discard()
		return
	}
	out <- l
}

// startHedge starts the second call of a hedged request, or returns nil
// when there is none to make (no other target available, no key, a
// request the provider cannot take, a Responses API request the target
// would serve by translation: translated calls are not hedged).
func (g *Gateway) startHedge(c *fiber.Ctx, st *state, plan *router.Plan, rec *record, info *reqInfo, body []byte) *leg {
	h := plan.Hedge()
	if h == nil {
		return nil
	}
	rt := st.target(g, h, rec.endpoint)
	rec.attempts++ // the router counts the call even when it cannot be made
	c.Set("x-tollgate-attempts", strconv.Itoa(rec.attempts))
	h.Start()
	if !rt.up.hasKey {
		h.Done(router.Outcome{Class: router.Auth}, 0)
		return nil
	}
	if info.ep == epResponses && !speaksResponses(rt.up) {
		h.Done(router.Outcome{Class: router.Canceled}, 0)
		return nil
	}
	call := g.newCall(c, rec, info, rt, body)
	req := fasthttp.AcquireRequest()
	if err := rt.up.prov.Build(req, &call); err != nil {
		fasthttp.ReleaseRequest(req)
		h.Done(router.Outcome{Class: router.ClientError}, 0)
		return nil
	}
	if h.Key != "" {
		rt.up.setKey(req, h.Key)
	}
	actx, span := g.tracer.StartAttempt(rec.traceCtx, rt.up.kind, rt.upstreamModel, rec.attempts)
	g.tracer.Inject(actx, &req.Header)
	rec.hedged = true
	c.Set(headerHedged, "true")
	if g.metrics != nil {
		g.metrics.Hedge(plan.Route().Name(), metrics.HedgeStarted)
	}
	return g.newLeg(h, rt, req, &call, body, rec, info.stream, span)
}

// hedgeWon serves the request with w, the first leg to answer, after
// cancelling the other.
func (g *Gateway) hedgeWon(c *fiber.Ctx, plan *router.Plan, rec *record, legs [2]*leg, w *leg, start time.Time,
	after time.Duration, out <-chan *leg) attemptResult {
	for _, o := range legs {
		if o == nil || o == w || o.settled {
			continue
		}
		if o.cancel() {
			(<-out).discard() // it had answered too: only o can be in the channel
		}
		o.settled = true
		o.a.Done(router.Outcome{Class: router.Canceled}, 0)
		o.span.SetStatus(StatusClientClosed, "hedge_lost")
		o.span.End()
		if g.metrics != nil {
			g.metrics.Hedge(plan.Route().Name(), metrics.HedgeCancelled)
		}
	}
	if g.metrics != nil && w.a.Hedge {
		g.metrics.Hedge(plan.Route().Name(), metrics.HedgeWon)
	}
	if legs[1] != nil {
		g.log.Debug("hedged request", "request_id", rec.requestID, "model", rec.model, "after", after,
			"first", legs[0].rt.deployment, "second", legs[1].rt.deployment, "winner", w.rt.deployment)
	}
	rec.route, rec.routeName, rec.lastTarget = w.rt, w.a.Route, w.rt.deployment
	c.Set("x-tollgate-model", w.rt.upstreamModel)
	c.Set("x-tollgate-provider", w.rt.up.name)
	if w.a.Hedge {
		w.span.SetStatus(fiber.StatusOK, "")
		w.span.End()
	}
	if w.relay == nil {
		rec.upstream += w.end.Sub(start)
		res := g.answerUnary(c, w.resp, w.rt, rec, &w.call, w.a, plan, w.end.Sub(w.start))
		fasthttp.ReleaseResponse(w.resp)
		w.resp = nil
		if res.aerr != nil {
			w.a.Done(res.outcome, 0)
		}
		return res
	}
	// The relay bills the request with its record when the stream ends.
	rec.upstream += w.start.Sub(start)
	g.commitStream(c, w.relay, rec, w.a, plan)
	return attemptResult{}
}
