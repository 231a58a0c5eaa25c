package gateway

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
	"github.com/tollgate/tollgate/pkg/rawjson"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/valyala/fasthttp"
)

// serveMessages handles POST /v1/messages: the Anthropic Messages API, as
// Claude Code and the Anthropic SDKs send it. A target on an anthropic
// provider gets the request natively; any other provider gets it
// translated to the OpenAI format and the answer translated back, event by
// event. Routing is chat's: the model's targets and fallbacks are tried as
// its routing config says, while nothing has reached the client. Errors
// are Anthropic-shaped.
func (g *Gateway) serveMessages(c *fiber.Ctx) error {
	rec, st := g.begin(c, "/v1/messages", epChat)
	defer release(rec)
	rec.anthropic = true
	c.Set("request-id", rec.requestID)
	p, aerr := g.authenticateAnthropic(c, st)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.principal = p
	body := c.Body()
	f, aerr := scanMessages(body)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	model := f.model
	if model.Type != gjson.String || model.Str == "" {
		return g.fail(c, rec, errBadRequest(codeMissingField, "model", "model: field required"))
	}
	if aerr := g.checkFileRefs(c, p, body, f.fileRefs); aerr != nil { // a document's file source (owners.go)
		return g.fail(c, rec, aerr)
	}
	rec.model = strings.Clone(model.Str)
	rec.stream = f.stream
	plan, aerr := g.resolve(c, st, rec, model.Str)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rr := plan.Route()
	if answered, err := g.lookupCache(c, st, rr.Config(), p, rec, false, body); answered {
		plan.Release()
		return err
	}
	cs := &rec.call
	cs.g, cs.m = g, newMessagesRequest(body, &f)
	m := &cs.m
	if aerr := g.admit(c, st, p, st.priceRoute(rr, model.Str), &m.admInfo, m.admBody, rec); aerr != nil {
		plan.Release()
		return g.fail(c, rec, aerr)
	}
	rec.body = m.admBody
	return g.attempts(c, st, plan, rec, (*messagesCaller)(cs))
}

// messagesFields is what the Messages endpoints read from a request body.
// model is a gjson.Result for the code that takes one (Str, Raw, Index;
// Type gjson.String only when the model is a string).
type messagesFields struct {
	model     gjson.Result
	stream    bool
	maxTokens int64
	fileRefs  bool // an object at some depth has a "file_id" member (owners.go)
}

// messagesKeys are the top-level keys scanMessages reads, in the order of
// the fields rawjson.Scan fills.
var messagesKeys = [...]string{"model", "stream", "max_tokens"}

// scanMessages checks a Messages API body and reads its model, stream and
// max_tokens in one pass (rawjson.Scan, issue #18): valid JSON nesting at
// most providers.MaxJSONDepth, and UTF-8 (a 400 naming the byte offset,
// as on the OpenAI endpoints). A valid body that is not an object has no
// model. Unlike the OpenAI endpoints, a repeated key is not refused here:
// the first is read, as before.
func scanMessages(body []byte) (messagesFields, *apiError) {
	var mf messagesFields
	var f [len(messagesKeys)]rawjson.Field
	refs, err := rawjson.ScanFind(body, providers.MaxJSONDepth, messagesKeys[:], f[:], fileIDKey)
	if err != nil {
		var e *rawjson.Error
		switch {
		case errors.Is(err, rawjson.ErrNotObject):
			return mf, nil
		case errors.Is(err, rawjson.ErrUTF8) && errors.As(err, &e):
			return mf, utf8Error(e.Offset)
		}
		return mf, errBadRequest(codeInvalidJSON, "", "request body is not valid JSON")
	}
	if m := f[0]; m.Raw != "" {
		mf.model = gjson.Result{Type: gjson.Number, Raw: m.Raw, Index: m.Idx}
		if rawjson.IsString(m.Raw) {
			mf.model.Type, mf.model.Str = gjson.String, rawjson.Unquote(m.Raw)
		}
	}
	mf.stream, mf.fileRefs = f[1].Raw == "true", refs
	mt := f[2].Raw
	if rawjson.IsString(mt) {
		mt = rawjson.Unquote(mt) // as gjson's Int read it
	}
	mf.maxTokens = rawjson.Int(mt)
	return mf, nil
}

// messagesRequest is a Messages API request in the two forms its targets
// take: native (anthropic providers) and translated to the OpenAI format.
type messagesRequest struct {
	body  []byte       // the client's Anthropic-format body
	model gjson.Result // its model value
	// oa is the OpenAI-format translation and oaInfo what the gateway
	// reads from it; oaErr says why there is none (answered only when a
	// translated target is tried).
	oa     []byte
	oaInfo reqInfo
	oaErr  *apiError
	// oaPlain is oa without its reasoning_effort, for kinds that have
	// none; made on the first such target (oa itself when it has none).
	oaPlain []byte
	// admBody and admInfo are what admission estimates from: the
	// translation when there is one (it counts the system prompt too).
	admBody []byte
	admInfo reqInfo
}

func newMessagesRequest(body []byte, f *messagesFields) messagesRequest {
	model := f.model
	m := messagesRequest{body: body, model: model, admBody: body,
		admInfo: reqInfo{model: model.Str, modelRaw: model.Raw, modelIdx: model.Index,
			stream: f.stream, maxTokens: f.maxTokens}}
	oa, _, _, err := anthropic.RequestToOpenAI(nil, body)
	m.setTranslation(oa, err)
	return m
}

// setTranslation records the OpenAI-format translation oa (or why there is
// none): admission then reads the translation when there is one.
func (m *messagesRequest) setTranslation(oa []byte, err error) {
	if err != nil {
		m.oaErr = translationError(err)
		return
	}
	m.oa = oa
	if m.oaErr = parseRequest(oa, epChat, &m.oaInfo); m.oaErr == nil {
		m.admBody, m.admInfo = oa, m.oaInfo
	}
}

// translationError is the answer to a request that cannot be translated to
// the OpenAI format: 400 unsupported_parameter naming the parameter the
// target cannot take, else invalid_request.
func translationError(err error) *apiError {
	var pe *providers.ParamError
	if errors.As(err, &pe) {
		return errBadRequest("unsupported_parameter", pe.Param, pe.Error())
	}
	return errBadRequest("invalid_request", "", err.Error())
}

// messagesNative is the capability of a provider that speaks the Messages
// API itself (anthropic.Provider): /v1/messages and count_tokens go to it
// unchanged but for the model.
type messagesNative interface {
	BuildNative(req *fasthttp.Request, body []byte, model, modelRaw string, modelIdx int, header *fasthttp.RequestHeader) error
	BuildCountTokens(req *fasthttp.Request, body []byte, model, modelRaw string, modelIdx int, header *fasthttp.RequestHeader) error
	NativeStream() providers.Stream
}

// messagesCaller calls targets for /v1/messages: natively on anthropic
// providers, translated for every other kind. It does not hedge (docs/routing.md:
// Hedged requests).
type messagesCaller callState

func (mc *messagesCaller) build(c *fiber.Ctx, req *fasthttp.Request, rec *record, rt *route) *apiError {
	var aerr *apiError
	mc.cur, mc.native, aerr = mc.g.buildMessages(c, req, rec, rt, &mc.m)
	return aerr
}

func (mc *messagesCaller) call(c *fiber.Ctx, _ *state, plan *router.Plan, a *router.Attempt, req *fasthttp.Request, rt *route, rec *record, _ tracing.Span) attemptResult {
	g, m := mc.g, &mc.m
	if rec.stream {
		var s providers.Stream
		var enc encoder
		if mc.native != nil {
			s = mc.native.NativeStream()
		} else {
			s = rt.up.prov.Stream(&mc.cur)
			ae := anthropic.NewEncoder(m.model.Str, rec.requestID)
			ae.EstimatePrompt(g.acct.Estimator, m.oa) // message_start's input_tokens (issue #16)
			enc = messagesEncoder{ae}
		}
		return g.startStream(c, req, rt, rec, &mc.cur, s, enc, a, plan)
	}
	res, took := g.tryUnaryMessages(c, req, rt, rec, &mc.cur, mc.native != nil, m.model.Str)
	if res.aerr == nil {
		a.Done(router.Outcome{Class: router.Success}, took)
		if rec.attempts > 1 {
			rec.fallbacks = plan.Fallbacks()
		}
		g.storeUnary(rec, c.Response().Body()) // Put copies before it returns
		g.finish(rec)
	}
	return res
}

// buildMessages writes the upstream request of one attempt: native for an
// anthropic provider (budget clamping does not rewrite native requests:
// their max_tokens is required by the API and bounds the reservation),
// else the OpenAI translation.
func (g *Gateway) buildMessages(c *fiber.Ctx, req *fasthttp.Request, rec *record, rt *route, m *messagesRequest) (providers.Call, messagesNative, *apiError) {
	native, _ := rt.up.prov.(messagesNative)
	if native == nil {
		call, aerr := g.buildTranslated(c, req, rec, rt, m)
		return call, nil, aerr
	}
	rec.body = m.body
	call := providers.Call{Endpoint: epChat, Body: m.body, Model: rt.upstreamModel, Stream: rec.stream}
	if err := native.BuildNative(req, m.body, rt.upstreamModel, m.model.Raw, m.model.Index, &c.Request().Header); err != nil {
		return call, nil, buildError(rt.up.name, err)
	}
	return call, native, nil
}

// buildTranslated writes the upstream request of one attempt from the
// OpenAI translation of a request in another API's format (m.oa: the
// Messages API's, the Gemini API's), without its reasoning effort for a
// kind that has none, clamped to the budget like chat.
func (g *Gateway) buildTranslated(c *fiber.Ctx, req *fasthttp.Request, rec *record, rt *route, m *messagesRequest) (providers.Call, *apiError) {
	if m.oaErr != nil {
		return providers.Call{}, m.oaErr
	}
	body := m.oa
	if caps := rt.up.caps; caps != nil && !caps.ReasoningEffort() {
		if m.oaPlain == nil {
			var ok bool
			if m.oaPlain, ok = anthropic.DropReasoningEffort(nil, m.oa); !ok {
				m.oaPlain = m.oa
			}
		}
		body = m.oaPlain // the members oaInfo locates precede the effort
	}
	rec.body = body
	info := &m.oaInfo
	call := providers.Call{Endpoint: epChat, Body: body, Model: rt.upstreamModel, ModelJSON: rt.modelJSON,
		ClampMaxTokens: rec.adm.clamp, RequestID: c.Response().Header.Peek(headerRequestID), Header: &c.Request().Header}
	info.fill(&call)
	if err := rt.up.prov.Build(req, &call); err != nil {
		return call, buildError(rt.up.name, err)
	}
	return call, nil
}

// tryUnaryMessages makes one non-stream Messages call. On success the
// answer is written (the caller finishes the request); a failure before
// that is returned for the routing decision.
func (g *Gateway) tryUnaryMessages(c *fiber.Ctx, req *fasthttp.Request, rt *route, rec *record, call *providers.Call, native bool, model string) (attemptResult, time.Duration) {
	return g.tryUnaryDialect(c, req, rt, rec, call, native, model, &messagesDialect)
}

// dialect is what a non-stream answer needs of a client API other than
// OpenAI's: the usage of a native answer, and the translation of an
// OpenAI-format one.
type dialect struct {
	// nativeUsage reads a native answer's usage, checking the answer.
	nativeUsage func(body []byte) (providers.Usage, error)
	// fromOpenAI translates an OpenAI chat.completion for model.
	fromOpenAI func(dst, oa []byte, model string) ([]byte, error)
}

// messagesDialect is the Anthropic Messages API's.
var messagesDialect = dialect{
	nativeUsage: func(body []byte) (providers.Usage, error) {
		// One pass: validity, the content array and the usage member.
		a, err := providers.ScanAnswer(body, "content")
		if err != nil {
			return providers.Usage{}, err
		}
		return anthropic.UsageOf(a.Usage), nil
	},
	fromOpenAI: anthropic.ResponseFromOpenAI,
}

// tryUnaryDialect makes one non-stream call for a client API d. On
// success the answer is written (the caller finishes the request); a
// failure before that is returned for the routing decision.
func (g *Gateway) tryUnaryDialect(c *fiber.Ctx, req *fasthttp.Request, rt *route, rec *record, call *providers.Call, native bool, model string, d *dialect) (attemptResult, time.Duration) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	took, err := callUnary(req, resp, rt, rec)
	if err != nil {
		return failed(rt.up.classify(err), 0, err, nil, nil), took
	}
	if st := resp.StatusCode(); st != fasthttp.StatusOK {
		ra := append([]byte(nil), resp.Header.Peek(fiber.HeaderRetryAfter)...)
		return failed(rt.up.statusError(st, resp.Body(), ra), st, nil, resp.Body(), ra), took
	}
	var out []byte
	if native {
		rec.usage, err = d.nativeUsage(resp.Body())
		out = resp.Body()
	} else {
		var oa []byte
		if oa, rec.usage, err = rt.up.prov.Response(nil, resp.Body(), call); err == nil {
			out, err = d.fromOpenAI(nil, oa, model)
		}
	}
	if err != nil {
		return failed(&apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: codeUpstreamBad,
			Message: fmt.Sprintf("provider %s returned a malformed response", rt.up.name)}, 0, err, nil, nil), took
	}
	rec.status, rec.started = fiber.StatusOK, true
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	c.Response().SetBody(out)
	return attemptResult{}, took
}

// countTokensPath is /v1/messages/count_tokens, as usage events, logs and
// metrics name it.
const countTokensPath = "/v1/messages/count_tokens"

// serveCountTokens handles POST /v1/messages/count_tokens through the one
// pipeline (issue 41, finding 12): authenticated, the model resolved as on
// /v1/messages (a chat model, allowed to the token), admitted like any
// request (it counts one request against rpm, and a principal over budget
// gets the budget error), then passed through to an anthropic provider
// (retried and fallen back as the model's routing says), else counted
// with the gateway's tokenizer over the translated request (an estimate,
// marked x-tollgate-estimated: true). It costs nothing: its usage event
// says endpoint /v1/messages/count_tokens and cost 0, with no tokens.
func (g *Gateway) serveCountTokens(c *fiber.Ctx) error {
	rec, st := g.begin(c, countTokensPath, epChat)
	defer release(rec)
	rec.anthropic, rec.path = true, countTokensPath
	rec.usage.Reported = true // counting bills no tokens: nothing to estimate
	c.Set("request-id", rec.requestID)
	p, aerr := g.authenticateAnthropic(c, st)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.principal = p
	body := c.Body()
	f, aerr := scanMessages(body)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	model := f.model
	if model.Type != gjson.String || model.Str == "" {
		return g.fail(c, rec, errBadRequest(codeMissingField, "model", "model: field required"))
	}
	rec.model = strings.Clone(model.Str)
	plan, aerr := g.resolve(c, st, rec, model.Str)
	if aerr != nil {
		return g.fail(c, rec, aerr)
	}
	rec.adm.priced = true // free, not unpriced
	if aerr := g.admitCost(c, st, p, &rec.adm, 0, func(*admission, int64) int64 { return 0 }); aerr != nil {
		plan.Release()
		return g.fail(c, rec, aerr)
	}
	cs := &rec.call
	cs.g, cs.m = g, messagesRequest{body: body, model: model}
	return g.attempts(c, st, plan, rec, (*countTokensCaller)(cs))
}

// countTokensCaller calls targets for /v1/messages/count_tokens: an
// anthropic provider counts natively; for any other the gateway counts
// itself and calls nothing.
type countTokensCaller callState

func (cc *countTokensCaller) build(c *fiber.Ctx, req *fasthttp.Request, _ *record, rt *route) *apiError {
	cc.native, _ = rt.up.prov.(messagesNative)
	if cc.native == nil {
		return nil
	}
	m := &cc.m
	if err := cc.native.BuildCountTokens(req, m.body, rt.upstreamModel, m.model.Raw, m.model.Index, &c.Request().Header); err != nil {
		return buildError(rt.up.name, err)
	}
	return nil
}

func (cc *countTokensCaller) call(c *fiber.Ctx, _ *state, plan *router.Plan, a *router.Attempt, req *fasthttp.Request, rt *route, rec *record, _ tracing.Span) attemptResult {
	if cc.native == nil {
		fasthttp.ReleaseRequest(req)
		oa, _, _, err := anthropic.RequestToOpenAI(nil, cc.m.body)
		if err != nil {
			return attemptResult{aerr: errBadRequest("invalid_request", "", err.Error()), outcome: router.Outcome{Class: router.ClientError}}
		}
		n := 0
		if e := cc.g.acct.Estimator; e != nil {
			n = e.ChatPrompt(oa)
		}
		a.Done(router.Outcome{Class: router.Canceled}, 0) // no call was made
		c.Set("x-tollgate-estimated", "true")
		cc.answer(c, rec, fmt.Appendf(nil, `{"input_tokens":%d}`, n))
		return attemptResult{}
	}
	return cc.callNative(c, plan, a, req, rt, rec)
}

// callNative makes a native count call and answers the provider's count.
func (cc *countTokensCaller) callNative(c *fiber.Ctx, plan *router.Plan, a *router.Attempt, req *fasthttp.Request, rt *route, rec *record) attemptResult {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	took, err := callUnary(req, resp, rt, rec)
	if err != nil {
		return failed(rt.up.classify(err), 0, err, nil, nil)
	}
	if st := resp.StatusCode(); st != fasthttp.StatusOK {
		ra := append([]byte(nil), resp.Header.Peek(fiber.HeaderRetryAfter)...)
		return failed(rt.up.statusError(st, resp.Body(), ra), st, nil, resp.Body(), ra)
	}
	a.Done(router.Outcome{Class: router.Success}, took)
	if rec.attempts > 1 {
		rec.fallbacks = plan.Fallbacks()
	}
	cc.answer(c, rec, resp.Body())
	return attemptResult{}
}

// answer sends a count and finishes the request.
func (cc *countTokensCaller) answer(c *fiber.Ctx, rec *record, body []byte) {
	rec.status, rec.started = fiber.StatusOK, true
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	c.Response().SetBody(body)
	cc.g.finish(rec)
}

// authenticateAnthropic accepts a JWT from x-api-key as well as
// Authorization: Bearer, as the Anthropic SDKs and Claude Code send it (an
// API key is read from x-api-key by authenticate on every endpoint).
func (g *Gateway) authenticateAnthropic(c *fiber.Ctx, st *state) (*auth.Principal, *apiError) {
	h := &c.Request().Header
	if len(h.Peek(fiber.HeaderAuthorization)) == 0 {
		if key := h.Peek("x-api-key"); len(key) > 0 && !apikey.HasPrefix(key) {
			h.Set(fiber.HeaderAuthorization, "Bearer "+string(key))
		}
	}
	return g.authenticate(c, st)
}

// writeAnthropicError answers e in the Anthropic shape
// {"type":"error","error":{"type","message"}}.
func writeAnthropicError(c *fiber.Ctx, e *apiError) error {
	c.Status(e.Status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	if e.Rate != nil {
		e.Rate.setHeaders(c)
	}
	if e.RetryAfter > 0 {
		c.Set(fiber.HeaderRetryAfter, fmt.Sprint(e.RetryAfter))
	} else if e.Status >= 400 && e.Status < 500 && (e.Status != 429 || e.Type == typeBudget) {
		c.Set("x-should-retry", "false")
	}
	return c.Send(anthropic.ErrorBody(anthropic.ErrorType(e.Status), e.Message))
}

// appendAnthropicErrorEvent writes an Anthropic stream error event.
func appendAnthropicErrorEvent(b []byte, e *apiError) []byte {
	b = append(b, "event: error\ndata: "...)
	b = append(b, anthropic.ErrorBody(anthropic.ErrorType(e.Status), e.Message)...)
	return append(b, "\n\n"...)
}
