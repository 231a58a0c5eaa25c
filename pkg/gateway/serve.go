package gateway

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/respcache"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/tollgate/tollgate/pkg/usage"
	"github.com/valyala/fasthttp"
)

const headerRequestID = "X-Request-Id"

// headerClientRequestID echoes the x-request-id a client sent, when it is
// sane (1 to 128 visible ASCII characters), for the client's own
// correlation. It is never the request's id: two tenants may send the same
// value, and the id keys GET /admin/usage/{request_id} and tollctl explain
// (issue 41, finding 14).
const headerClientRequestID = "X-Client-Request-Id"

// record is the request-owned value every stage works on (doc.go): what
// the gateway learns about one request, for its log line and usage
// accounting, and the endpoint adapter's state.
type record struct {
	requestID     string
	start         time.Time
	total         time.Duration // from start to finish, read once in finish
	principal     *auth.Principal
	route         *route
	endpoint      endpoint
	stream        bool
	status        int
	errType       string
	clientAborted bool
	usage         tokenUsage
	// billEstimate: usage is the gateway's estimate made before the call,
	// billed as such (an accepted batch, batch.go).
	billEstimate   bool
	ttft           time.Duration // time to first content chunk (streams)
	upstream       time.Duration // upstream call, header to end of body
	model          string        // the requested model, even when unknown
	routeName      string        // the model route that served it (after fallbacks)
	degradation    string        // the degradation step taken, if any
	cache          *cacheState   // nil when the model does not cache
	span           tracing.Span  // the request span (no-op without tracing)
	traceCtx       context.Context
	cachedModel    string // model and provider of a cache hit's original answer
	cachedProvider string
	attempts       int
	hedged         bool      // a second call raced a slow first one
	lastTarget     string    // provider/model of the latest attempt
	fallbacks      []string  // targets tried before the one that served
	anthropic      bool      // the client speaks the Anthropic format (/v1/messages)
	gemini         bool      // the client speaks the Gemini API (/v1beta/models/...)
	call           callState // the endpoint adapter's state (chatCaller, messagesCaller)
	prices         *pricing.Table
	adm            admission
	started        bool   // the client got a 200 (an answer began)
	body           []byte // the request body, for token estimation
	delivered      []byte // content delivered in a stream, for estimation
	path           string // the endpoint of a pass-through request (passthrough.go) or count_tokens
	units          uint64 // units of a pass-through request, billed by unit
	unit           string
	serves         string // the model type a pass-through endpoint serves (record.modelType)
	// held: something outside the endpoint's handler holds the record (a
	// relay, a hedge leg, a replayed cache hit), so it is not pooled
	// (release).
	held bool
	// begun is what beginUpstream recorded before the first upstream
	// call; its EventID is the usage event's id ("" until then).
	begun usage.Begun
}

// endpointPath is the path the client called.
func (rec *record) endpointPath() string {
	if rec.path != "" {
		return rec.path
	}
	switch {
	case rec.anthropic:
		return "/v1/messages"
	case rec.gemini && rec.stream:
		return geminiStreamPath
	case rec.gemini:
		return geminiGeneratePath
	}
	return endpointName[rec.endpoint]
}

// modelType is the model type (config.Model.Type) the request's endpoint
// serves: a pass-through endpoint's own, embeddings on /v1/embeddings,
// chat on every other (chat, completions, the Responses API, the Messages
// API and its count_tokens).
func (rec *record) modelType() string {
	switch {
	case rec.serves != "":
		return rec.serves
	case rec.endpoint == epEmbeddings:
		return config.ModelTypeEmbeddings
	}
	return config.ModelTypeChat
}

// usage is token usage as reported by the provider.
type tokenUsage = providers.Usage

// serve handles one chat, completions, embeddings or Responses request.
func (g *Gateway) serve(c *fiber.Ctx, ep endpoint) error {
	rec, st := g.begin(c, endpointName[ep], ep)
	defer release(rec)
	p, aerr := g.authenticate(c, st)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.principal = p
	body := c.Body()
	cs := &rec.call
	cs.g, cs.body = g, body
	info := &cs.info
	if aerr = parseRequest(body, ep, info); aerr != nil {
		return g.fail(c, rec, aerr)
	}
	if aerr = g.checkFileRefs(c, p, body, info.fileRefs); aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.stream = info.stream
	rec.model = strings.Clone(info.model) // info.model aliases the request buffer, reused after the handler
	plan, aerr := g.resolve(c, st, rec, info.model)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rr := plan.Route()
	if aerr := st.checkEndpoint(rr, cs); aerr != nil {
		plan.Release()
		return g.fail(c, rec, aerr)
	}
	if answered, err := g.lookupCache(c, st, rr.Config(), p, rec, info.includeUsage, body); answered {
		plan.Release()
		return err
	}
	if aerr := g.admit(c, st, p, st.priceRoute(rr, info.model), info, body, rec); aerr != nil {
		plan.Release()
		return g.fail(c, rec, aerr)
	}
	rec.body = body
	return g.attempts(c, st, plan, rec, (*chatCaller)(cs))
}

// callState is an endpoint adapter's request state, kept in the record
// so that it costs no allocation of its own; chatCaller and
// messagesCaller are its two views.
type callState struct {
	g      *Gateway
	info   reqInfo // chat family: what parseRequest read
	body   []byte  // chat family: the client's body
	m      messagesRequest
	cur    providers.Call       // the latest attempt's; its decoders read it
	native messagesNative       // /v1/messages: the latest attempt's native provider, or nil
	gem    geminiCall           // the Gemini endpoints' (gemini_inbound.go)
	rs     responsesTranslation // the Responses API: the chat translation (responses_translate.go)
}

// chatCaller calls targets for the chat family (chat, completions,
// embeddings, the Responses API): the client's body with byte-level edits,
// non-stream, streamed or hedged; a Responses API request to a target that
// does not speak it, translated (responses_translate.go).
type chatCaller callState

func (cc *chatCaller) build(c *fiber.Ctx, req *fasthttp.Request, rec *record, rt *route) *apiError {
	if cs := (*callState)(cc); cs.translatesResponses(rt) {
		return cs.buildTranslated(c, req, rec, rt)
	}
	cc.cur = cc.g.newCall(c, rec, &cc.info, rt, cc.body)
	if err := rt.up.prov.Build(req, &cc.cur); err != nil {
		return buildError(rt.up.name, err)
	}
	return nil
}

func (cc *chatCaller) call(c *fiber.Ctx, st *state, plan *router.Plan, a *router.Attempt, req *fasthttp.Request, rt *route, rec *record, span tracing.Span) attemptResult {
	g := cc.g
	if cs := (*callState)(cc); cs.translatesResponses(rt) {
		return cs.callTranslated(c, plan, a, req, rt, rec)
	}
	after := plan.HedgeAfter()
	if after > 0 || plan.Route().Config().Hedge.After != "" {
		c.Set(headerHedged, strconv.FormatBool(rec.hedged))
	}
	switch {
	case after > 0:
		return g.tryHedged(c, st, plan, a, req, rt, rec, &cc.cur, &cc.info, after, span)
	case cc.info.stream:
		return g.tryStream(c, req, rt, rec, &cc.cur, a, plan)
	default:
		return g.tryUnary(c, req, rt, rec, &cc.cur, a, plan)
	}
}

// endAttemptSpan ends the span of the attempt that served the request (rt).
func endAttemptSpan(span tracing.Span, rec *record, rt *route) {
	span.SetGenAI(tracing.GenAI{System: rt.up.kind, RequestModel: rec.model, ResponseModel: rt.upstreamModel,
		InputTokens: int64(rec.usage.Prompt), OutputTokens: int64(rec.usage.Completion)})
	span.SetStatus(fiber.StatusOK, "")
	span.End()
}

// planFailed answers a request whose every attempt failed with the last
// failure (503 no_target_available when no target could be tried), after
// recording the fallback chain and releasing the plan.
func (g *Gateway) planFailed(c *fiber.Ctx, rec *record, plan *router.Plan, last *apiError) error {
	if last == nil {
		last = &apiError{Status: fiber.StatusServiceUnavailable, Type: typeUnavailable, Code: codeNoTarget,
			Message: fmt.Sprintf("no target can serve %q now: %v", rec.model, plan.Err())}
	}
	rec.fallbacks = plan.Fallbacks()
	plan.Release()
	return g.fail(c, rec, last)
}

// newCall describes the upstream call of a request to target rt.
func (g *Gateway) newCall(c *fiber.Ctx, rec *record, info *reqInfo, rt *route, body []byte) providers.Call {
	call := providers.Call{
		Endpoint: rec.endpoint, Body: body, Model: rt.upstreamModel,
		ClampMaxTokens: rec.adm.clamp, RequestID: c.Response().Header.Peek(headerRequestID),
		Header: &c.Request().Header,
	}
	info.fill(&call)
	if rt.upstreamModel != info.model {
		call.ModelJSON = rt.modelJSON
	}
	return call
}

// attemptResult is how one upstream call ended before the client got
// anything: aerr is nil when the answer went out (or is streaming).
type attemptResult struct {
	aerr       *apiError
	outcome    router.Outcome
	retryAfter []byte
}

func failed(aerr *apiError, status int, err error, body, retryAfter []byte) attemptResult {
	return attemptResult{aerr: aerr, outcome: router.Classify(status, err, body, true), retryAfter: retryAfter}
}

// callUnary sends req (and releases it) and reads the whole answer into
// resp within the route's total timeout; the time it took counts as the
// request's upstream time.
func callUnary(req *fasthttp.Request, resp *fasthttp.Response, rt *route, rec *record) (time.Duration, error) {
	upStart := time.Now()
	err := rt.up.hc.DoDeadline(req, resp, rec.start.Add(rt.up.timeouts.Total))
	fasthttp.ReleaseRequest(req)
	took := time.Since(upStart)
	rec.upstream += took
	return took, err
}

// tryUnary makes one non-stream call. On success the upstream body is
// handed to the client without copying and the request is finished.
func (g *Gateway) tryUnary(c *fiber.Ctx, req *fasthttp.Request, rt *route, rec *record, call *providers.Call, a *router.Attempt, plan *router.Plan) attemptResult {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	took, err := callUnary(req, resp, rt, rec)
	if err != nil {
		return failed(rt.up.classify(err), 0, err, nil, nil)
	}
	return g.answerUnary(c, resp, rt, rec, call, a, plan, took)
}

// answerUnary answers a non-stream call's response. On success the attempt
// is reported (took is its latency sample), the answer goes to the client
// and the request is finished.
func (g *Gateway) answerUnary(c *fiber.Ctx, resp *fasthttp.Response, rt *route, rec *record, call *providers.Call, a *router.Attempt, plan *router.Plan, took time.Duration) attemptResult {
	if st := resp.StatusCode(); st != fasthttp.StatusOK {
		ra := append([]byte(nil), resp.Header.Peek(fiber.HeaderRetryAfter)...)
		return failed(rt.up.statusError(st, resp.Body(), ra), st, nil, resp.Body(), ra)
	}
	body := resp.Body()
	out, u, err := rt.up.prov.Response(c.Response().Body()[:0], body, call)
	if err != nil {
		return failed(&apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: codeUpstreamBad,
			Message: fmt.Sprintf("provider %s returned a malformed response", rt.up.name)}, 0, err, nil, nil)
	}
	rec.usage = u
	if !u.Reported {
		rec.delivered = appendAnswerText(rec.delivered[:0], out) // estimated from the answer
	}
	rec.status = fiber.StatusOK
	rec.started = true
	a.Done(router.Outcome{Class: router.Success}, took)
	if rec.attempts > 1 {
		rec.fallbacks = plan.Fallbacks()
	}
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	g.storeUnary(rec, out) // Put copies before it returns
	if len(out) > 0 && len(body) > 0 && &out[0] == &body[0] {
		// Passed through: the client response takes the upstream buffer and
		// the upstream response takes the client's back to its pool. That
		// one comes back emptied (fasthttp empties it after each response)
		// and goes back at its full length: the pool sizes its buffers by
		// the length they hold when put back, so an empty one passed for a
		// small buffer, was dropped as too large for its size, and every
		// upstream body was read into a new one.
		old := c.Response().SwapBody(out)
		resp.SwapBody(old[:cap(old)])
	} else {
		c.Response().SetBodyRaw(nil)
		c.Response().SetBody(out)
	}
	g.finish(rec)
	return attemptResult{}
}

// stream starts a streamed call. The first event is read before any byte
// goes to the client, so a failure or timeout up to then is a plain HTTP
// error, never a 200 followed by an error event.
func (g *Gateway) tryStream(c *fiber.Ctx, req *fasthttp.Request, rt *route, rec *record, call *providers.Call, a *router.Attempt, plan *router.Plan) attemptResult {
	return g.startStream(c, req, rt, rec, call, rt.up.prov.Stream(call), nil, a, plan)
}

// startStream makes one streamed call; on success the relay owns the
// response, the attempt and the plan until the stream ends.
func (g *Gateway) startStream(c *fiber.Ctx, req *fasthttp.Request, rt *route, rec *record, call *providers.Call, s providers.Stream, enc encoder, a *router.Attempt, plan *router.Plan) attemptResult {
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	upStart := time.Now()
	t := rt.up.timeouts
	err := rt.up.hc.DoDeadline(req, resp, rec.start.Add(min(t.FirstByte, t.Total)))
	fasthttp.ReleaseRequest(req)
	r, res := g.openStream(resp, err, rt, rec, upStart, s, enc)
	if r == nil {
		return res
	}
	g.commitStream(c, r, rec, a, plan)
	return attemptResult{}
}

// openStream checks a streamed call's answer and reads its first event. It
// owns resp, s and enc: on failure (nil relay) they are released.
func (g *Gateway) openStream(resp *fasthttp.Response, err error, rt *route, rec *record, upStart time.Time, s providers.Stream, enc encoder) (*relay, attemptResult) {
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		releaseStream(s, enc)
		return nil, failed(rt.up.classify(err), 0, err, nil, nil)
	}
	if st := resp.StatusCode(); st != fasthttp.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.BodyStream(), 64<<10))
		ra := append([]byte(nil), resp.Header.Peek(fiber.HeaderRetryAfter)...)
		aerr := rt.up.statusError(st, body, ra)
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		releaseStream(s, enc)
		return nil, failed(aerr, st, nil, body, ra)
	}
	r := g.newRelay(resp, rt, rec, upStart, s, enc)
	if aerr := r.prime(); aerr != nil {
		r.release()
		// Failing before the first event is a failure before the first byte.
		st := aerr.Status
		if aerr.Code == "upstream_timeout" {
			return nil, failed(aerr, 0, context.DeadlineExceeded, nil, nil)
		}
		return nil, failed(aerr, st, nil, []byte(aerr.Message), nil)
	}
	return r, attemptResult{}
}

// commitStream hands a primed stream to the client: from here the relay
// owns the request's record, the response, the attempt and the plan until
// the stream ends.
func (g *Gateway) commitStream(c *fiber.Ctx, r *relay, rec *record, a *router.Attempt, plan *router.Plan) {
	r.attempt, r.plan = a, plan
	rec.started = true
	if rec.cache != nil && rec.cache.put && g.cache != nil {
		r.cached = &respcache.Entry{Stream: true}
		if len(r.out) > 0 { // the primed first events
			r.cached.AppendEvent(r.out)
		}
	}
	c.Response().Header.SetContentType("text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	c.Context().SetBodyStream(r, -1)
	r.watch.start(c.Context().Conn(), r)
	r.client, r.writeTimeout = c.Context().Conn(), g.cfg.WriteTimeout
}

// releaseStream releases decoders of a stream that never started.
func releaseStream(s providers.Stream, enc encoder) {
	s.Close()
	if enc != nil {
		enc.Release()
	}
}

// fail answers an error and accounts for the request.
func (g *Gateway) fail(c *fiber.Ctx, rec *record, e *apiError) error {
	rec.status = e.Status
	rec.errType = e.Code
	if rec.errType == "" {
		rec.errType = e.Type
	}
	g.finish(rec)
	switch {
	case rec.anthropic:
		return writeAnthropicError(c, e)
	case rec.gemini:
		return writeGeminiError(c, e)
	}
	return writeError(c, e)
}

// finish is the single place a request ends: it is billed, published as a
// usage event and logged (when enabled).
func (g *Gateway) finish(rec *record) {
	rec.total = time.Since(rec.start)
	g.bill(rec)
	g.observe(rec)
	if g.tracer.Enabled() {
		rec.span.SetGenAI(tracing.GenAI{RequestModel: rec.model, InputTokens: int64(rec.usage.Prompt), OutputTokens: int64(rec.usage.Completion)})
		rec.span.SetStatus(rec.status, rec.errType)
		rec.span.End()
	}
	rec.body = nil
	if !g.logRequests {
		return
	}
	attrs := []any{
		"request_id", rec.requestID,
		"endpoint", rec.endpointPath(),
		"status", rec.status,
		"stream", rec.stream,
		"duration", rec.total,
	}
	if rec.principal != nil {
		attrs = append(attrs, "sub", rec.principal.Subject, "dept", rec.principal.Dept, "team", rec.principal.Team)
	}
	if rec.route != nil {
		attrs = append(attrs, "model", rec.route.name, "provider", rec.route.up.name)
	}
	if rec.usage.Reported {
		attrs = append(attrs, "prompt_tokens", rec.usage.Prompt, "completion_tokens", rec.usage.Completion)
	}
	if rec.errType != "" {
		attrs = append(attrs, "error", rec.errType)
	}
	if rec.clientAborted {
		attrs = append(attrs, "client_aborted", true)
	}
	if rec.hedged {
		attrs = append(attrs, "hedged", true)
	}
	g.log.Info("request", attrs...)
}

// missingKey answers a request routed to a provider with no API key.
func (g *Gateway) missingKey(u *upstream) *apiError {
	msg := fmt.Sprintf("provider %s has no API key configured", u.name)
	if u.apiKeyEnv != "" {
		msg = fmt.Sprintf("provider %s has no API key: set %s and restart the gateway", u.name, u.apiKeyEnv)
	}
	return &apiError{Status: fiber.StatusServiceUnavailable, Type: typeUnavailable, Code: "provider_not_configured", Message: msg}
}

// statusError maps a provider's non-200 answer to the client's answer. The
// provider's own message is passed on (without the key) where it helps the
// caller fix the request; credential failures are the operator's problem
// and say only which provider refused.
func (u *upstream) statusError(status int, body, retryAfter []byte) *apiError {
	msg := u.scrub(truncate(u.prov.ErrorMessage(body), 1024))
	switch {
	case status == fasthttp.StatusUnauthorized || status == fasthttp.StatusForbidden:
		return &apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: "upstream_auth_failed",
			Message: fmt.Sprintf("provider %s rejected the gateway's credentials (HTTP %d)", u.name, status)}
	case status == fasthttp.StatusTooManyRequests:
		e := &apiError{Status: status, Type: typeRateLimit, Code: "upstream_rate_limited",
			Message: fmt.Sprintf("provider %s is rate limiting: %s", u.name, orDefault(msg, "too many requests"))}
		if n, err := parseRetryAfter(retryAfter); err == nil {
			e.RetryAfter = n
		}
		return e
	case status == fasthttp.StatusNotFound:
		return &apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: "upstream_not_found",
			Message: fmt.Sprintf("provider %s answered 404: %s", u.name, orDefault(msg, "not found"))}
	case status >= 400 && status < 500 && status != fasthttp.StatusRequestTimeout:
		return &apiError{Status: fiber.StatusBadRequest, Type: typeInvalidRequest, Code: "upstream_rejected",
			Message: fmt.Sprintf("provider %s rejected the request: %s", u.name, orDefault(msg, fmt.Sprintf("HTTP %d", status)))}
	case status == fasthttp.StatusRequestTimeout || status == fasthttp.StatusGatewayTimeout:
		return &apiError{Status: fiber.StatusGatewayTimeout, Type: typeTimeout, Code: "upstream_timeout",
			Message: fmt.Sprintf("provider %s timed out (HTTP %d)", u.name, status)}
	case status == fasthttp.StatusServiceUnavailable:
		return &apiError{Status: status, Type: typeUnavailable, Code: "upstream_unavailable",
			Message: fmt.Sprintf("provider %s is unavailable: %s", u.name, orDefault(msg, "HTTP 503"))}
	default:
		return &apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: "upstream_error",
			Message: fmt.Sprintf("provider %s failed: %s", u.name, orDefault(msg, fmt.Sprintf("HTTP %d", status)))}
	}
}

func parseRetryAfter(b []byte) (int, error) {
	var n int
	if len(b) == 0 {
		return 0, io.EOF
	}
	for _, ch := range b {
		if ch < '0' || ch > '9' || n > 1e6 {
			return 0, fmt.Errorf("retry-after %q is not seconds", b)
		}
		n = n*10 + int(ch-'0')
	}
	return n, nil
}

// setRequestID sets the request's id, the gateway's own (newRequestID),
// on the response and returns it; a sane x-request-id from the client is
// echoed in x-client-request-id.
func setRequestID(c *fiber.Ctx) string {
	h := &c.Response().Header
	if v := h.Peek(headerRequestID); len(v) > 0 {
		return string(v)
	}
	id := newRequestID()
	h.Set(headerRequestID, id)
	if in := c.Request().Header.Peek(headerRequestID); validRequestID(in) {
		h.SetBytesV(headerClientRequestID, in)
	}
	return id
}

func validRequestID(b []byte) bool {
	if len(b) == 0 || len(b) > 128 {
		return false
	}
	for _, ch := range b {
		if ch <= ' ' || ch > '~' {
			return false
		}
	}
	return true
}

// newRequestID returns "req_" and 128 bits in hex: the unix time in
// milliseconds (48 bits, so ids sort by time) and 80 random bits. The
// generator is per-thread (math/rand/v2), so no lock is shared between
// requests.
func newRequestID() string {
	var raw [16]byte
	var out [4 + 32]byte
	ms, a, b := uint64(time.Now().UnixMilli()), rand.Uint64(), rand.Uint64()
	for i := range 6 {
		raw[i] = byte(ms >> (8 * (5 - i)))
	}
	for i := range 8 {
		raw[6+i] = byte(a >> (8 * i))
	}
	raw[14], raw[15] = byte(b), byte(b>>8)
	copy(out[:], "req_")
	hex.Encode(out[4:], raw[:])
	return string(out[:])
}

// jsonString returns s as a JSON string literal.
func jsonString(s string) []byte {
	b, _ := json.Marshal(s) // a string always encodes
	return b
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// observe records the request's metrics.
func (g *Gateway) observe(rec *record) {
	if g.metrics == nil {
		return
	}
	m := g.refused[rec.endpoint]
	if rec.path != "" {
		m = g.passMetrics(rec)
	} else if rec.route != nil {
		m = rec.route.metrics[rec.endpoint]
	}
	m.Observe(rec.status, rec.total, rec.upstream, rec.ttft, rec.stream)
	if rec.route != nil && rec.started && !rec.adm.priced {
		m.Unpriced()
	}
}
