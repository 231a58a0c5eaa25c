package gateway

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/valyala/fasthttp"
)

// Every endpoint runs the same stages, in this order: begin (request id,
// trace span, the state it will finish on), authenticate, parse (the
// endpoint's own), resolve (model, wildcard capture, endpoint kind,
// allow-list, degradation ladder), the cache and admission, the attempts,
// and finish, the one place a request ends (bill, usage event, metrics,
// span, log). begin and resolve live here so that no endpoint can skip
// one; what an endpoint deliberately does not do is said where it is
// served (docs/endpoints.md: Endpoints).

// Error codes the gateway answers on more than one endpoint. Clients and
// dashboards branch on them: one constant each, never a literal.
const (
	codeModelNotFound   = "model_not_found"
	codeModelNotAllowed = "model_not_allowed"
	codeWrongEndpoint   = "wrong_endpoint"
	codeBudgetDegraded  = "budget_degraded"
	codeNoTarget        = "no_target_available"
	codeInvalidJSON     = "invalid_json"
	codeMissingField    = "missing_field"
	codeUnsupportedEP   = "unsupported_endpoint"
	codeUpstreamBad     = "upstream_malformed"
)

// begin opens a request: its record, request id, trace span and state. label
// is the endpoint as clients call it (the span name and the usage event's
// endpoint); ep is the OpenAI endpoint it is billed and measured as.
func (g *Gateway) begin(c *fiber.Ctx, label string, ep endpoint) (*record, *state) {
	rec := recordPool.Get().(*record)
	rec.start, rec.endpoint, rec.requestID = time.Now(), ep, setRequestID(c)
	rec.traceCtx, rec.span = g.tracer.StartRequest(c.Context(), &c.Request().Header, label, rec.requestID)
	st := g.state.Load()
	rec.prices = st.prices
	return rec, st
}

// recordPool holds the records of requests that ended in their handler.
// A record is some 2.5 KB, most of a request's allocations: reused, it no
// longer feeds the garbage collector once per request.
var recordPool = sync.Pool{New: func() any { return new(record) }}

// release returns rec to the pool when the request ended in its handler
// and nothing else holds rec: a stream's relay, a hedge's legs (the loser
// may still run) and a replayed cache hit keep it (record.held), and it is
// then left to the garbage collector. Endpoints call it deferred, right
// after begin.
func release(rec *record) {
	if rec.held {
		return
	}
	*rec = record{}
	recordPool.Put(rec)
}

// resolve starts routing the request's model: an unknown model is 404
// (before the token's allow-list), a wildcard capture outside its route's
// pattern 400, a model whose type is not the endpoint's (record.modelType)
// 400, a model the token
// does not allow 403. Then the degradation ladder: a refusal step is 429,
// a model step switches the plan to the step's model when that model
// serves the same kind of endpoint (pass-through endpoints, whose models
// are no chat models, take refusal steps only). On an error the plan is
// already released.
func (g *Gateway) resolve(c *fiber.Ctx, st *state, rec *record, model string) (*router.Plan, *apiError) {
	p := rec.principal
	plan := st.router.Plan(model, p, rec.start)
	if plan == nil {
		return nil, &apiError{Status: fiber.StatusNotFound, Type: typeInvalidRequest, Code: codeModelNotFound, Param: "model",
			Message: fmt.Sprintf("the model %q does not exist", model)}
	}
	aerr := captureError(plan)
	rr := plan.Route()
	if want := rec.modelType(); aerr == nil && rr.Type() != want {
		aerr = errBadRequest(codeWrongEndpoint, "model", fmt.Sprintf("the model %q is not served on %s: it is a model of type %s, and %s serves models of type %s",
			model, rec.endpointPath(), rr.Type(), rec.endpointPath(), want))
	}
	if aerr == nil && !p.AllowsModel(model) && !p.AllowsModel(rr.Name()) {
		aerr = &apiError{Status: fiber.StatusForbidden, Type: typePermission, Code: codeModelNotAllowed, Param: "model",
			Message: fmt.Sprintf("your token does not allow the model %q", model)}
	}
	var prio string
	if aerr == nil {
		prio, aerr = st.priorities.of(c, p)
	}
	if aerr != nil {
		plan.Release()
		return nil, aerr
	}
	d := g.degrade(st, p, prio)
	if d == nil || !d.step.Refuse && rec.path != "" {
		return plan, nil
	}
	rec.degradation = d.label
	c.Set("x-tollgate-degraded", d.label)
	if d.step.Refuse {
		plan.Release()
		return nil, &apiError{Status: fiber.StatusTooManyRequests, Type: typeBudget, Code: codeBudgetDegraded,
			Message: fmt.Sprintf("budget degradation step %s: this priority is not served now", d.label)}
	}
	if np := st.router.Plan(d.step.Model, p, rec.start); np != nil {
		if np.Route().Type() == rr.Type() {
			plan.Release()
			return np, nil
		}
		np.Release()
	}
	return plan, nil
}

// caller is an endpoint adapter's part of the attempts stage: how one
// target is called. The chat family (chatCaller), /v1/messages
// (messagesCaller) and /v1/messages/count_tokens (countTokensCaller)
// implement it; attempts owns the rest (routing, retries
// and fallbacks, the router's bookkeeping, keys, headers, spans, the plan).
// Pass-through endpoints make one call and never retry (a streamed upload
// cannot be sent twice), so they do not use it.
type caller interface {
	// build writes the upstream request of one attempt at rt; an error is
	// the client's (the loop stops and answers it).
	build(c *fiber.Ctx, req *fasthttp.Request, rec *record, rt *route) *apiError
	// call makes the built call. On success a non-stream answer went out
	// and the request is finished with its attempt reported, or a relay
	// owns the stream, its attempt and the plan.
	call(c *fiber.Ctx, st *state, plan *router.Plan, a *router.Attempt, req *fasthttp.Request, rt *route, rec *record, span tracing.Span) attemptResult
}

// attempts calls the plan's targets in turn until one answers, retrying and
// falling back as the model's routing config allows. Only failures before
// the first byte reaches the client are retried. The plan is released here
// (a committed stream's by its relay).
func (g *Gateway) attempts(c *fiber.Ctx, st *state, plan *router.Plan, rec *record, cl caller) error {
	var last *apiError
	for a := plan.Next(); a != nil; a = plan.Next() {
		rt := st.target(g, a, rec.endpoint)
		rec.route = rt
		rec.routeName = a.Route
		if a.Fallback && g.metrics != nil && rec.attempts > 0 {
			g.metrics.Fallback(rec.model, rec.lastTarget, rt.deployment)
		}
		rec.attempts++
		rec.lastTarget = rt.deployment
		a.Start()
		if !rt.up.hasKey {
			last = g.missingKey(rt.up)
			o := router.Outcome{Class: router.Auth}
			a.Done(o, 0)
			if !plan.ShouldRetry(o) {
				break
			}
			continue
		}
		req := fasthttp.AcquireRequest()
		if aerr := cl.build(c, req, rec, rt); aerr != nil {
			fasthttp.ReleaseRequest(req)
			a.Done(router.Outcome{Class: router.ClientError}, 0)
			plan.Release()
			return g.fail(c, rec, aerr)
		}
		if a.Key != "" {
			rt.up.setKey(req, a.Key)
		}
		actx, aspan := g.tracer.StartAttempt(rec.traceCtx, rt.up.kind, rt.upstreamModel, rec.attempts)
		g.tracer.Inject(actx, &req.Header)
		c.Set("x-tollgate-model", rt.upstreamModel)
		c.Set("x-tollgate-provider", rt.up.name)
		c.Set("x-tollgate-attempts", strconv.Itoa(rec.attempts))
		g.beginUpstream(rec, rt)
		res := cl.call(c, st, plan, a, req, rt, rec, aspan)
		if res.aerr == nil {
			endAttemptSpan(aspan, rec, rec.route) // a hedge may have served it
			if !rec.stream {
				plan.Release()
			}
			return nil
		}
		aspan.SetStatus(res.aerr.Status, res.aerr.Code)
		aspan.End()
		res.outcome.RetryAfter = router.ParseRetryAfter(res.retryAfter, time.Now())
		a.Done(res.outcome, 0)
		last = res.aerr
		if !plan.ShouldRetry(res.outcome) || plan.Backoff(c.Context()) != nil {
			break
		}
	}
	return g.planFailed(c, rec, plan, last)
}
