package gateway

import (
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/router"
)

// Every endpoint runs the same stages, in this order: begin (request id,
// trace span, the state it will finish on), authenticate, parse (the
// endpoint's own), resolve (model, wildcard capture, endpoint kind,
// allow-list, degradation ladder), the cache and admission, the attempts,
// and finish, the one place a request ends (bill, usage event, metrics,
// span, log). begin and resolve live here so that no endpoint can skip
// one; what an endpoint deliberately does not do is said where it is
// served (README: Endpoints).

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
	rec := &record{start: time.Now(), endpoint: ep, requestID: setRequestID(c)}
	rec.traceCtx, rec.span = g.tracer.StartRequest(c.Context(), &c.Request().Header, label, rec.requestID)
	st := g.state.Load()
	rec.prices = st.prices
	return rec, st
}

// resolve starts routing the request's model: an unknown model is 404
// (before the token's allow-list), a wildcard capture outside its route's
// pattern 400, a model of the other endpoint kind 400, a model the token
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
	if aerr == nil && rec.path == "" && rr.Embeddings() != (rec.endpoint == epEmbeddings) {
		aerr = errBadRequest(codeWrongEndpoint, "model", fmt.Sprintf("the model %q is not served on %s", model, rec.endpointPath()))
	}
	if aerr == nil && !p.AllowsModel(model) && !p.AllowsModel(rr.Name()) {
		aerr = &apiError{Status: fiber.StatusForbidden, Type: typePermission, Code: codeModelNotAllowed, Param: "model",
			Message: fmt.Sprintf("your token does not allow the model %q", model)}
	}
	if aerr != nil {
		plan.Release()
		return nil, aerr
	}
	d := g.degrade(c, st, p)
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
		if np.Route().Embeddings() == rr.Embeddings() {
			plan.Release()
			return np, nil
		}
		np.Release()
	}
	return plan, nil
}
