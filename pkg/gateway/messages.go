package gateway

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
	"github.com/valyala/fasthttp"
)

// serveMessages handles POST /v1/messages: the Anthropic Messages API, as
// Claude Code and the Anthropic SDKs send it. A model served by an
// anthropic provider is passed through natively; any other provider gets
// the request translated to the OpenAI format and the answer translated
// back, event by event. Errors are Anthropic-shaped.
func (g *Gateway) serveMessages(c *fiber.Ctx) error {
	rec := record{start: time.Now(), endpoint: epChat, requestID: setRequestID(c), anthropic: true}
	c.Set("request-id", rec.requestID)
	st := g.state.Load()
	rec.prices = st.prices
	p, aerr := g.authenticateAnthropic(c, st)
	if aerr != nil {
		return g.fail(c, &rec, aerr)
	}
	rec.principal = p
	body := c.Body()
	if len(body) == 0 || !providers.ValidJSON(body) {
		return g.fail(c, &rec, errBadRequest("invalid_json", "", "request body is not valid JSON"))
	}
	if aerr := checkUTF8(body); aerr != nil {
		return g.fail(c, &rec, aerr)
	}
	model := gjson.GetBytes(body, "model")
	if model.Type != gjson.String || model.Str == "" {
		return g.fail(c, &rec, errBadRequest("missing_field", "model", "model: field required"))
	}
	rec.model = strings.Clone(model.Str)
	rec.stream = gjson.GetBytes(body, "stream").Type == gjson.True
	rt := st.routes[model.Str]
	if rt == nil {
		return g.fail(c, &rec, &apiError{Status: fiber.StatusNotFound, Type: typeNotFound, Code: "model_not_found",
			Message: fmt.Sprintf("model: %s", model.Str)})
	}
	rec.route = rt
	if rt.embeddings {
		return g.fail(c, &rec, errBadRequest("wrong_endpoint", "model", fmt.Sprintf("the model %q is not served on /v1/messages", rt.name)))
	}
	if !p.AllowsModel(rt.name) {
		return g.fail(c, &rec, &apiError{Status: fiber.StatusForbidden, Type: typePermission, Code: "model_not_allowed",
			Message: fmt.Sprintf("your token does not allow the model %q", rt.name)})
	}
	if !rt.up.hasKey {
		return g.fail(c, &rec, g.missingKey(rt.up))
	}
	native, _ := rt.up.prov.(*anthropic.Provider)
	var call providers.Call
	var info reqInfo
	if native == nil {
		// Translate to the OpenAI format and take the common path.
		oa, _, _, err := anthropic.RequestToOpenAI(nil, body)
		if err != nil {
			var pe *providers.ParamError
			if errors.As(err, &pe) {
				return g.fail(c, &rec, errBadRequest("unsupported_parameter", pe.Param, pe.Error()))
			}
			return g.fail(c, &rec, errBadRequest("invalid_request", "", err.Error()))
		}
		var perr *apiError
		if info, perr = parseRequest(oa, epChat); perr != nil {
			return g.fail(c, &rec, perr)
		}
		body = oa
	} else {
		info = reqInfo{model: model.Str, modelRaw: model.Raw, modelIdx: model.Index, stream: rec.stream,
			maxTokens: gjson.GetBytes(body, "max_tokens").Int()}
	}
	adm, aerr := g.admit(c, st, p, rt, &info, body)
	if aerr != nil {
		rec.adm.checks = adm.checks // a budget refusal records the limits checked
		return g.fail(c, &rec, aerr)
	}
	rec.adm, rec.body = adm, body
	req := fasthttp.AcquireRequest()
	var err error
	if native != nil {
		// Budget clamping does not rewrite native requests: their
		// max_tokens is required by the API and bounds the reservation.
		err = native.BuildNative(req, body, rt.upstreamModel, model.Raw, model.Index, &c.Request().Header)
		call = providers.Call{Endpoint: epChat, Body: body, Model: rt.upstreamModel, Stream: rec.stream}
	} else {
		call = providers.Call{Endpoint: epChat, Body: body, Model: rt.upstreamModel,
			ModelRaw: info.modelRaw, ModelIdx: info.modelIdx, ModelJSON: rt.modelJSON,
			Stream: info.stream, IncludeUsage: info.includeUsage, StreamOptionsRaw: info.streamOpts,
			StreamOptionsIdx: info.streamOptIdx, MaxTokens: info.maxTokens, ClampMaxTokens: adm.clamp,
			RequestID: c.Response().Header.Peek(headerRequestID), Header: &c.Request().Header}
		err = rt.up.prov.Build(req, &call)
	}
	if err != nil {
		fasthttp.ReleaseRequest(req)
		return g.fail(c, &rec, errBadRequest("unsupported_parameter", "", err.Error()))
	}
	c.Set("x-tollgate-model", rt.upstreamModel)
	c.Set("x-tollgate-provider", rt.up.name)
	if rec.stream {
		var s providers.Stream
		var enc *anthropic.Encoder
		if native != nil {
			s = native.NativeStream()
		} else {
			s = rt.up.prov.Stream(&call)
			enc = anthropic.NewEncoder(model.Str, rec.requestID)
		}
		return g.streamWith(c, req, rt, &rec, &call, s, enc)
	}
	return g.unaryMessages(c, req, rt, &rec, &call, native != nil, model.Str)
}

// unaryMessages relays a non-stream Messages call.
func (g *Gateway) unaryMessages(c *fiber.Ctx, req *fasthttp.Request, rt *route, rec *record, call *providers.Call, native bool, model string) error {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	upStart := time.Now()
	err := rt.up.hc.DoDeadline(req, resp, rec.start.Add(rt.up.timeouts.Total))
	fasthttp.ReleaseRequest(req)
	rec.upstream = time.Since(upStart)
	if err != nil {
		return g.fail(c, rec, rt.up.classify(err))
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return g.fail(c, rec, rt.up.statusError(resp.StatusCode(), resp.Body(), resp.Header.Peek(fiber.HeaderRetryAfter)))
	}
	var out []byte
	if native {
		if !providers.ValidJSON(resp.Body()) {
			err = providers.ErrMalformed
		}
		out, rec.usage = resp.Body(), anthropic.NativeUsage(resp.Body())
	} else {
		var oa []byte
		if oa, rec.usage, err = rt.up.prov.Response(nil, resp.Body(), call); err == nil {
			out, err = anthropic.ResponseFromOpenAI(nil, oa, model)
		}
	}
	if err != nil {
		return g.fail(c, rec, &apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: "upstream_malformed",
			Message: fmt.Sprintf("provider %s returned a malformed response", rt.up.name)})
	}
	rec.status, rec.started = fiber.StatusOK, true
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	c.Response().SetBody(out)
	g.finish(rec)
	return nil
}

// serveCountTokens handles POST /v1/messages/count_tokens: passed through
// to an anthropic provider, else counted with the gateway's tokenizer over
// the translated request (an estimate, marked x-tollgate-estimated: true).
func (g *Gateway) serveCountTokens(c *fiber.Ctx) error {
	rec := record{start: time.Now(), endpoint: epChat, requestID: setRequestID(c), anthropic: true}
	st := g.state.Load()
	p, aerr := g.authenticateAnthropic(c, st)
	if aerr != nil {
		return writeAnthropicError(c, aerr)
	}
	body := c.Body()
	if !providers.ValidJSON(body) {
		return writeAnthropicError(c, errBadRequest("invalid_json", "", "request body is not valid JSON"))
	}
	if aerr := checkUTF8(body); aerr != nil {
		return writeAnthropicError(c, aerr)
	}
	model := gjson.GetBytes(body, "model")
	rt := st.routes[model.Str]
	if rt == nil {
		return writeAnthropicError(c, &apiError{Status: fiber.StatusNotFound, Type: typeNotFound, Message: "model: " + model.Str})
	}
	if !p.AllowsModel(rt.name) {
		return writeAnthropicError(c, &apiError{Status: fiber.StatusForbidden, Type: typePermission, Message: "your token does not allow this model"})
	}
	if native, ok := rt.up.prov.(*anthropic.Provider); ok {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		if err := native.BuildCountTokens(req, body, rt.upstreamModel, model.Raw, model.Index, &c.Request().Header); err != nil {
			return writeAnthropicError(c, errBadRequest("invalid_request", "", err.Error()))
		}
		if err := rt.up.hc.DoDeadline(req, resp, rec.start.Add(rt.up.timeouts.Total)); err != nil {
			return writeAnthropicError(c, rt.up.classify(err))
		}
		if resp.StatusCode() != fasthttp.StatusOK {
			return writeAnthropicError(c, rt.up.statusError(resp.StatusCode(), resp.Body(), nil))
		}
		c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
		return c.Send(resp.Body())
	}
	oa, _, _, err := anthropic.RequestToOpenAI(nil, body)
	if err != nil {
		return writeAnthropicError(c, errBadRequest("invalid_request", "", err.Error()))
	}
	n := 0
	if g.acct.Estimator != nil {
		n = g.acct.Estimator.ChatPrompt(oa)
	}
	c.Set("x-tollgate-estimated", "true")
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	return c.SendString(fmt.Sprintf(`{"input_tokens":%d}`, n))
}

// authenticateAnthropic accepts the token from x-api-key as well as
// Authorization: Bearer, as the Anthropic SDKs and Claude Code send it.
func (g *Gateway) authenticateAnthropic(c *fiber.Ctx, st *state) (*auth.Principal, *apiError) {
	h := &c.Request().Header
	if len(h.Peek(fiber.HeaderAuthorization)) == 0 {
		if key := h.Peek("x-api-key"); len(key) > 0 {
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
