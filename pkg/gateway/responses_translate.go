package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/openai"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/valyala/fasthttp"
)

// A Responses API request to a target whose provider does not speak the
// API (anthropic, gemini, bedrock, OpenAI-compatible presets without it) is
// served by translation, as /v1/messages is on non-anthropic targets: the
// request becomes a chat completions request (openai.RequestFromResponses),
// the target's own chat translation applies, and its answer comes back as a
// response object (openai.ResponseFromChat) or a Responses event sequence
// (openai.ResponsesEncoder). Everything else is chat's pipeline: routing,
// retries and fallbacks (a route may mix native and translated targets),
// admission from the client's body, the usage the provider reported,
// billed by finish. A translated call is not hedged.

// responsesTranslation is a Responses request's chat translation, made
// once per request: before admission when the requested model has a
// translated target (a request it cannot express is refused then), else on
// the first translated fallback target.
type responsesTranslation struct {
	made bool
	oa   []byte  // the chat translation
	info reqInfo // what parseRequest read from it
	// effortAt is where oa's reasoning_effort member starts (-1: none);
	// plain is oa without it, for kinds that have none, made on the first
	// such target.
	effortAt int
	plain    []byte
	err      *apiError // why there is no translation
}

// translateResponses makes the request's chat translation, once.
func (cs *callState) translateResponses() *apiError {
	rs := &cs.rs
	if rs.made {
		return rs.err
	}
	rs.made = true
	oa, at, err := openai.RequestFromResponses(make([]byte, 0, len(cs.body)+512), cs.body)
	if err != nil {
		rs.err = translationError(err)
		return rs.err
	}
	rs.oa, rs.effortAt = oa, at
	rs.err = parseRequest(oa, epChat, &rs.info)
	return rs.err
}

// translatesResponses reports whether a Responses request to rt is served
// by translation.
func (cs *callState) translatesResponses(rt *route) bool {
	return cs.info.ep == epResponses && !speaksResponses(rt.up)
}

// buildTranslated writes the upstream chat request of a translated
// Responses attempt. The record keeps the client's body: the gateway's
// estimates read the Responses format.
func (cs *callState) buildTranslated(c *fiber.Ctx, req *fasthttp.Request, rec *record, rt *route) *apiError {
	if aerr := cs.translateResponses(); aerr != nil {
		return aerr
	}
	rs := &cs.rs
	body := rs.oa
	if caps := rt.up.caps; caps != nil && !caps.ReasoningEffort() && rs.effortAt >= 0 {
		if rs.plain == nil {
			rs.plain = append(append(make([]byte, 0, rs.effortAt+1), rs.oa[:rs.effortAt]...), '}')
		}
		body = rs.plain // the members info locates precede the effort
	}
	cs.cur = providers.Call{Endpoint: epChat, Body: body, Model: rt.upstreamModel, ModelJSON: rt.modelJSON,
		ClampMaxTokens: rec.adm.clamp, RequestID: c.Response().Header.Peek(headerRequestID), Header: &c.Request().Header}
	rs.info.fill(&cs.cur)
	if err := rt.up.prov.Build(req, &cs.cur); err != nil {
		var pe *providers.ParamError
		if errors.As(err, &pe) && pe.Code != providers.CodeInvalidURLValue {
			// Named as the client wrote it, not as the translation has it.
			err = &providers.ParamError{Param: openai.ResponsesParam(pe.Param), Code: pe.Code,
				Message: fmt.Sprintf("%s (as %s of the request translated to chat completions)", pe.Message, pe.Param)}
		}
		return buildError(rt.up.name, err)
	}
	return nil
}

// callTranslated makes a translated Responses call, streamed or not.
func (cs *callState) callTranslated(c *fiber.Ctx, plan *router.Plan, a *router.Attempt, req *fasthttp.Request, rt *route, rec *record) attemptResult {
	g := cs.g
	if rec.stream {
		enc := responsesEncoder{openai.NewResponsesEncoder(rec.model, rec.requestID, time.Now().Unix())}
		return g.startStream(c, req, rt, rec, &cs.cur, rt.up.prov.Stream(&cs.cur), enc, a, plan)
	}
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
	oa, u, err := rt.up.prov.Response(nil, resp.Body(), &cs.cur)
	var out []byte
	if err == nil {
		out, err = openai.ResponseFromChat(c.Response().Body()[:0], oa, rec.model, rec.requestID, time.Now().Unix(), u)
	}
	if err != nil {
		return failed(&apiError{Status: fiber.StatusBadGateway, Type: typeUpstream, Code: codeUpstreamBad,
			Message: fmt.Sprintf("provider %s returned a malformed response", rt.up.name)}, 0, err, nil, nil)
	}
	rec.usage = u
	if !u.Reported {
		rec.delivered = appendAnswerText(rec.delivered[:0], oa) // estimated from the answer
	}
	rec.status, rec.started = fiber.StatusOK, true
	a.Done(router.Outcome{Class: router.Success}, took)
	if rec.attempts > 1 {
		rec.fallbacks = plan.Fallbacks()
	}
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	g.storeUnary(rec, out)    // Put copies before it returns
	c.Response().SetBody(out) // out may be the response's own buffer (its dst): SetBody then copies in place
	g.finish(rec)
	return attemptResult{}
}
