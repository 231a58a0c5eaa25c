package gateway

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// publisher takes usage events off the request path.
type publisher interface {
	Enqueue(ev *usagev1.UsageEvent) error
	Saturated() bool
}

// Accounting is what the gateway needs to bill and limit requests. Every
// field is optional: without a Publisher no events are sent, without a
// Tracker no budget is enforced, without a Limiter no rate limit applies.
type Accounting struct {
	Publisher publisher
	// Journal, when set (the usage publisher), records each request whose
	// upstream call begins, for the next start to bill if this process
	// ends before the request's event is enqueued (begun.go).
	Journal journal
	// Tracker enforces budgets and owns their reservations: wire its OnAck
	// to the publisher's (usage.Config.OnAck).
	Tracker *budget.Tracker
	// Prices is the price table at start (default: the embedded one);
	// Reload replaces it. Rate limits and the unpriced-model policy come
	// from the config.
	Prices *pricing.Table
	// Limiter enables rate limits; the gateway's limiters divide them by
	// its Share (ratelimit.Options.Share).
	Limiter *ratelimit.Limiter
	// Presence keeps the Limiter's Share; nil when the limits are this
	// gateway's alone. Only its metrics are read (ratelimit.RegisterMetrics).
	Presence  *ratelimit.Presence
	Estimator *tokenize.Estimator
	// OutputReserve is the completion tokens reserved for a request
	// without max_tokens. Default 4096.
	OutputReserve int64
}

// admission is what admit decided for one request.
type admission struct {
	price     pricing.Price
	priced    bool
	res       *budget.Reservation
	clamp     int64 // max_tokens set by the gateway, 0 when untouched
	rateKeys  [8]rateCharge
	nRateKeys int
	tokens    int64 // tokens charged to rate limits at admission
	checks    budgetChecks
}

// maxChecks is the most budget limits one usage event records (6 scopes x
// 3 periods of config limits would be 18; real configs apply a handful).
// Past it, the first ones checked are kept, and the refusing one.
const maxChecks = 8

// budgetChecks are the limits admit checked, with the spend and headroom
// of that moment, for the usage event (budgets). Fixed size: recording them
// allocates nothing on the request path.
type budgetChecks struct {
	a        [maxChecks]budget.Checked
	n        int
	reserved int64 // the request's reservation, nano-USD
}

type rateCharge struct {
	limiter *ratelimit.Limiter
	key     string
	tpm     int64
}

// admit admits a chat, Responses or Messages request: the model's price
// (refusing an unpriced one when the gateway is set to), then admitCost
// with a first guess of the prompt's tokens (a quarter of the body's
// bytes) charged to rate limits and, near a budget's limit, the prompt
// counted exactly and the output limit clamped to what the headroom
// affords (call.ClampMaxTokens). The reservation covers every answer the
// upstream may generate: the output limit (OutputReserve when the request
// sets none) times n (or best_of), and a clamp is per answer.
//
// A clamped answer is not stored in the response cache (issue #41): its
// key is the client's body, whose limit the clamp changed, and teammates
// sending that body would be served the cut answer.
func (g *Gateway) admit(c *fiber.Ctx, st *state, p *auth.Principal, rt *route, info *reqInfo, body []byte, rec *record) *apiError {
	price, priced := routePrice(st.prices, rt)
	if !priced && st.refuseUnpriced {
		return errBadRequest("model_not_priced", "model", fmt.Sprintf("the model %q has no price, and this gateway refuses unpriced models", rt.name))
	}
	adm := &rec.adm
	adm.price, adm.priced = price, priced
	aerr := g.admitChat(c, st, p, info, body, adm)
	if adm.clamp > 0 && rec.cache != nil {
		rec.cache.put = false
	}
	return aerr
}

// admitChat is admit's admission: admitCost with the reservation of a
// call that may generate its whole output limit.
func (g *Gateway) admitChat(c *fiber.Ctx, st *state, p *auth.Principal, info *reqInfo, body []byte, adm *admission) *apiError {
	promptGuess := int64(len(body) / 4) // a cheap first estimate; exact only when it matters
	return g.admitCost(c, st, p, adm, promptGuess, func(adm *admission, headroom int64) int64 {
		a := &g.acct
		per := info.maxTokens // per choice
		if per <= 0 {
			per = a.OutputReserve
		}
		n := max(info.choices, 1)
		out := mulSat(per, n) // every choice may run to the limit
		est := adm.price.Cost(pricing.Usage{PromptTokens: uint64(promptGuess), CompletionTokens: uint64(out)})
		prompt := promptGuess
		if est > headroom/2 && a.Estimator != nil {
			// Near the limit: count the prompt exactly.
			if info.ep == epChat {
				prompt = int64(a.Estimator.ChatPrompt(body))
			} else {
				prompt = int64(a.Estimator.Prompt(body))
			}
			est = adm.price.Cost(pricing.Usage{PromptTokens: uint64(prompt), CompletionTokens: uint64(out)})
		}
		if est > headroom && adm.price.OutputPerM > 0 {
			promptCost := adm.price.Cost(pricing.Usage{PromptTokens: uint64(prompt)})
			// The clamp is per choice: n answers of clamp tokens each.
			if afford := affordable(headroom-promptCost, adm.price.OutputPerM) / n; afford >= 1 && afford < per {
				adm.clamp = afford
				est = adm.price.Cost(pricing.Usage{PromptTokens: uint64(prompt), CompletionTokens: uint64(afford * n)})
			}
		}
		return est
	})
}

// admitCost is admission, the same for every endpoint: the publisher's
// fail-closed state, rate limits (one request and tokens, the tokens
// known before the call), then, when a budget limits the request's
// scopes and cost is not nil, a reservation of cost(&adm, headroom)
// nano-USD, checked with
// the reservation included (two requests racing for the last headroom
// cannot both pass). adm, the request record's (zero but for the price it
// holds), is filled in place: an admission is some 1 KB, and a copy
// returned by value would move to the heap once per request. A refused
// request keeps only the limits checked (for its usage event).
func (g *Gateway) admitCost(c *fiber.Ctx, st *state, p *auth.Principal, adm *admission, tokens int64, cost func(adm *admission, headroom int64) int64) *apiError {
	aerr := g.admitInto(c, st, p, adm, tokens, cost)
	if aerr != nil {
		*adm = admission{checks: adm.checks}
	}
	return aerr
}

// admitInto is admitCost's steps, filling adm as they go.
func (g *Gateway) admitInto(c *fiber.Ctx, st *state, p *auth.Principal, adm *admission, tokens int64, cost func(adm *admission, headroom int64) int64) *apiError {
	a := &g.acct
	if aerr := g.backlogFull(); aerr != nil {
		return aerr
	}
	if aerr := g.rateLimit(adm, st, p, tokens); aerr != nil {
		return aerr
	}
	if a.Tracker == nil || cost == nil {
		return nil
	}
	scopes, claims, aerr := g.budgetScopes(adm, p)
	if aerr != nil {
		return aerr
	}
	bd := a.Tracker.Bind(scopes)
	headroom, limited := bd.Headroom(claims)
	if !limited {
		return nil
	}
	if aerr := g.reserve(c, adm, bd, claims, cost(adm, headroom)); aerr != nil {
		return aerr
	}
	if adm.clamp > 0 {
		c.Set("x-tollgate-max-tokens-clamped", strconv.FormatInt(adm.clamp, 10))
	}
	return nil
}

// backlogFull refuses a request while the publisher can hold no more
// events (usage.fail_closed).
func (g *Gateway) backlogFull() *apiError {
	if pub := g.acct.Publisher; pub != nil && pub.Saturated() {
		return &apiError{Status: fiber.StatusServiceUnavailable, Type: typeUnavailable, Code: "usage_backlog_full",
			Message: "the gateway cannot record usage right now (event buffer and spool are full); retry later", RetryAfter: 5}
	}
	return nil
}

// budgetScopes returns the budget scopes of p and the limits its token
// carries. A malformed budgets claim refunds adm's rate charges and
// answers 401.
func (g *Gateway) budgetScopes(adm *admission, p *auth.Principal) (budget.Scopes, []budget.Limit, *apiError) {
	pb := principalBudgetOf(p)
	if pb.err != nil {
		g.refundRate(adm)
		return pb.scopes, nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "invalid_token", Message: "invalid token: " + pb.err.Error()}
	}
	return pb.scopes, pb.claims, nil
}

// principalBudget is what admission derives from a principal: its budget
// scopes (team and project qualified by department) and the limits of its
// token's budgets claim, or why that claim is malformed. It is kept with
// the principal (auth.Principal.Derived), which the verifier caches per
// token, so that requests with the same token share it; the Tracker only
// reads the claims.
type principalBudget struct {
	scopes budget.Scopes
	claims []budget.Limit
	err    error
	// rateKey keys the token's rpm/tpm claims on the key limiter (rateKeyOf).
	rateKey string
}

// principalBudgetOf returns p's principalBudget, deriving it on the first
// request of p (two first requests racing may both derive it; either
// result is the same).
func principalBudgetOf(p *auth.Principal) *principalBudget {
	if pb, ok := p.Derived().(*principalBudget); ok {
		return pb
	}
	pb := &principalBudget{scopes: budget.NewScopes(p.KeyID, p.Subject, p.Dept, p.Team, p.Project), rateKey: rateKeyOf(p)}
	if len(p.Budgets) > 0 {
		pb.claims, pb.err = budget.FromClaims(p.Budgets)
		if bySubject(p) {
			for i := range pb.claims {
				if l := &pb.claims[i]; l.Scope == budget.ScopeKey {
					l.Scope, l.Value = budget.ScopeSubject, budget.Star
				}
			}
		}
	}
	p.SetDerived(pb)
	return pb
}

// bySubject reports whether the limits signed into p's token (rpm, tpm and
// key-scope budgets) belong to its subject rather than to the token's id: a
// JWT with a subject. Its holder may get a new token, with a new id, from
// the identity provider at any time, so limits kept per token id would
// start afresh with each one (issue 41, finding 13). An API key's limits
// stay its own: only an operator creates keys.
func bySubject(p *auth.Principal) bool {
	return p.Issuer != apikey.Issuer && p.Subject != ""
}

// rateKeyOf returns the key limiter's key for p's rpm/tpm claims: its
// issuer and subject (bySubject; each issuer names its own subjects), else
// its key id, else its subject.
func rateKeyOf(p *auth.Principal) string {
	switch {
	case bySubject(p):
		return "sub\x00" + p.Issuer + "\x00" + p.Subject
	case p.KeyID != "":
		return p.KeyID
	}
	return p.Subject
}

// reserve reserves est nano-USD on every total of bd's scopes, then checks
// every limit including it (reserve first: two requests racing for the
// last headroom cannot both pass), recording the checks for the usage
// event. A refusal drops the reservation and refunds the rate charges. A
// request that waited for its gateway's budget lease to be refilled says
// so in x-tollgate-budget-wait-ms.
func (g *Gateway) reserve(c *fiber.Ctx, adm *admission, bd budget.Bound, claims []budget.Limit, est int64) *apiError {
	adm.res = bd.Reserve(est)
	checks, waited, err := bd.CheckReserved(c.Context(), claims, est, adm.checks.a[:0])
	adm.checks.n, adm.checks.reserved = len(checks), est
	if waited > 0 {
		c.Set("x-tollgate-budget-wait-ms", strconv.FormatFloat(float64(waited.Microseconds())/1000, 'f', 1, 64))
	}
	if err != nil {
		adm.res.Release()
		adm.res = nil
		g.refundRate(adm)
		setBudgetHeaders(c, err)
		return budgetError(err)
	}
	return nil
}

// setBudgetHeaders says on a refusal which limit refused and its figures,
// each a decimal USD amount (docs/budgets.md: Budget refusals): the applied spend,
// this gateway's reservations for requests in flight, what other gateways
// hold (budget leases) and this request's own worst-case estimate.
func setBudgetHeaders(c *fiber.Ctx, err error) {
	var ex *budget.ExceededError
	if !errors.As(err, &ex) {
		return
	}
	c.Set("x-tollgate-budget-scope", ex.Scope.String())
	c.Set("x-tollgate-budget-value", ex.Value)
	c.Set("x-tollgate-budget-period", ex.Period.String())
	c.Set("x-tollgate-budget-limit-usd", pricing.FormatUSD(ex.LimitNano))
	c.Set("x-tollgate-budget-spent-usd", pricing.FormatUSD(ex.SpendNano))
	c.Set("x-tollgate-budget-reserved-usd", pricing.FormatUSD(ex.ReservedNano))
	c.Set("x-tollgate-budget-held-usd", pricing.FormatUSD(ex.HeldNano))
	c.Set("x-tollgate-budget-estimate-usd", pricing.FormatUSD(ex.EstimateNano))
}

// affordable is how many output tokens nano-USD buys at perM nano-USD per
// million tokens.
func affordable(nano, perM int64) int64 {
	if nano <= 0 || perM <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(nano), 1_000_000)
	if hi >= uint64(perM) {
		return 1 << 62
	}
	q, _ := bits.Div64(hi, lo, uint64(perM))
	return int64(min(q, 1<<62))
}

// mulSat is a × b for non-negative a and b, at most the largest int64.
func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// budgetError answers a refusal with the budget's message: an
// *budget.ExceededError names the scope, value, period and limit, then the
// spend, reservations, leases held elsewhere and the request's own worst
// case as separate figures.
func budgetError(err error) *apiError {
	return &apiError{Status: fiber.StatusTooManyRequests, Type: typeBudget, Code: "budget_exceeded", Message: err.Error()}
}

// rateLimit applies the token's rpm/tpm claims (per subject for a JWT, per
// key for an API key: rateKeyOf) and the configured rate limits, each on
// its own scope's limiter.
func (g *Gateway) rateLimit(adm *admission, st *state, p *auth.Principal, tokens int64) *apiError {
	a := &g.acct
	if a.Limiter == nil {
		return nil
	}
	adm.tokens = tokens
	if p.RPM > 0 || p.TPM > 0 {
		if aerr := g.allow(adm, g.limiters[budget.ScopeKey], principalBudgetOf(p).rateKey, p.RPM, p.TPM, tokens, ""); aerr != nil {
			return aerr
		}
	}
	for i := range st.rateLimits {
		rl := &st.rateLimits[i]
		v := scopeValue(p, rl.scope)
		if v == "" || rl.Value != "*" && rl.Value != v {
			continue
		}
		if aerr := g.allow(adm, g.limiters[rl.scope], v, rl.RPM, rl.TPM, tokens, rl.Scope); aerr != nil {
			return aerr
		}
	}
	return nil
}

// allow charges one request and tokens to key on l. scope names a
// configured limit's scope for the refusal's message ("" for the token's
// own rpm/tpm claims).
func (g *Gateway) allow(adm *admission, l *ratelimit.Limiter, key string, rpm, tpm, tokens int64, scope string) *apiError {
	ok, wait := l.Allow(key, rpm, tpm, tokens)
	if !ok {
		g.refundRate(adm)
		what := "token"
		if scope != "" {
			what = scope + " " + key
		}
		secs := max(int((wait+time.Second-1)/time.Second), 1)
		rs := &rateShare{rpm: rpm, tpm: tpm, gateways: l.Share().Gateways()}
		msg := fmt.Sprintf("rate limit reached for %s (rpm %d, tpm %d); retry in %d s", what, rpm, tpm, secs)
		if rs.gateways > 1 {
			msg = fmt.Sprintf("rate limit reached for %s (rpm %d, tpm %d across %d gateways: this one allows rpm %s, tpm %s); retry in %d s",
				what, rpm, tpm, rs.gateways, rs.share(rpm), rs.share(tpm), secs)
		}
		return &apiError{Status: fiber.StatusTooManyRequests, Type: typeRateLimit, Code: "rate_limit_exceeded", RetryAfter: secs,
			Message: msg, Rate: rs}
	}
	if adm.nRateKeys < len(adm.rateKeys) {
		adm.rateKeys[adm.nRateKeys] = rateCharge{l, key, tpm}
		adm.nRateKeys++
	}
	return nil
}

// refundRate returns the tokens charged at admission to a request refused
// later on.
func (g *Gateway) refundRate(adm *admission) {
	for _, rc := range adm.rateKeys[:adm.nRateKeys] {
		rc.limiter.Charge(rc.key, rc.tpm, -adm.tokens)
	}
	adm.nRateKeys = 0
}

// scopeValue is p's value of a rate limit's scope ("" for global, which
// rate limits do not take).
func scopeValue(p *auth.Principal, scope budget.Scope) string {
	switch scope {
	case budget.ScopeKey:
		return p.KeyID
	case budget.ScopeSubject:
		return p.Subject
	case budget.ScopeTeam:
		return p.Team
	case budget.ScopeDept:
		return p.Dept
	case budget.ScopeProject:
		return p.Project
	}
	return ""
}

// bill prices the finished request, settles its reservation and rate
// charges, and publishes its usage event. Requests without a principal
// (refused before authentication) produce no event.
func (g *Gateway) bill(rec *record) {
	adm := &rec.adm
	if rec.principal == nil || g.acct.Publisher == nil {
		if adm.res != nil {
			adm.res.Release()
		}
		return
	}
	u := rec.usage
	estimated := rec.billEstimate
	if !u.Reported && rec.started {
		u, estimated = g.estimate(rec), true
	}
	if rec.cache != nil && rec.cache.hit {
		// A hit costs nothing unless the model bills hits in full.
		adm.priced = false
		if rec.cache.full && rec.prices != nil {
			adm.price, adm.priced = rec.prices.Lookup(rec.cachedModel)
		}
	} else if rt := rec.route; rt != nil && rec.prices != nil && rec.path == "" {
		// Price what served the request: after a fallback, another model
		// or another provider. A pass-through request (one call, no
		// fallback) keeps the price passPrice found for what it asked
		// (an image's size and quality) and count_tokens its zero one.
		if pr, ok := routePrice(rec.prices, rt); ok {
			adm.price, adm.priced = pr, true
		}
	}
	cost := int64(0)
	// A request that failed before any answer began costs nothing, not even
	// its per_request price.
	if adm.priced && (rec.started || rec.status < 400) {
		pu := pricing.Usage{PromptTokens: u.Prompt, CompletionTokens: u.Completion, CachedTokens: u.Cached,
			CacheWriteTokens: u.CacheWrite, ReasoningTokens: u.Reasoning, ServiceTier: u.Tier}
		unitUsage(&pu, rec)
		cost = adm.price.Cost(pu)
	}
	used := int64(u.Prompt + u.Completion)
	if rec.cache != nil && rec.cache.hit && !rec.cache.full {
		used = 0 // a hit billed zero used no provider tokens (admitHit)
	}
	for _, rc := range adm.rateKeys[:adm.nRateKeys] {
		rc.limiter.Charge(rc.key, rc.tpm, used-adm.tokens)
	}
	if g.metrics != nil && rec.route != nil {
		g.metrics.Tokens(rec.principal.Dept, rec.route.name, u.Prompt, u.Completion, u.Cached, u.Reasoning, cost)
	}
	ev := g.event(rec, u, estimated, cost)
	if adm.res != nil {
		adm.res.Settle(cost)
		g.acct.Tracker.Await(ev.EventId, adm.res)
	}
	if err := g.acct.Publisher.Enqueue(ev); err != nil {
		if adm.res != nil && g.acct.Tracker.Forget(ev.EventId) {
			adm.res.Release()
		}
		g.log.Error("usage event not recorded", "request_id", rec.requestID, "err", err)
	}
}

// routePrice is the price of what rt serves in t: found when the state
// was built for its routes, looked up for a route made per request.
func routePrice(t *pricing.Table, rt *route) (pricing.Price, bool) {
	if t != nil && rt.prices == t {
		return rt.price, rt.priced
	}
	return findPrice(t, rt)
}

// findPrice looks up the price of what rt serves: the provider's entry
// ("provider/model", looked up on the route's deployment, which is built
// once per route, so nothing is concatenated per request), else the
// upstream model's, else the route's model name's.
func findPrice(t *pricing.Table, rt *route) (pricing.Price, bool) {
	if rt.up != nil {
		if p, ok := t.LookupAt(rt.up.name, rt.deployment); ok {
			return p, true
		}
	}
	if p, ok := t.Lookup(rt.upstreamModel); ok {
		return p, true
	}
	return t.Lookup(rt.name)
}

// estimate counts tokens with the tokenizer when the provider reported no
// usage (a client abort, a cut stream): the prompt, and what was delivered.
func (g *Gateway) estimate(rec *record) tokenUsage {
	var u tokenUsage
	if g.acct.Estimator == nil {
		return u
	}
	if len(rec.body) > 0 {
		switch rec.endpoint {
		case epChat:
			u.Prompt = uint64(g.acct.Estimator.ChatPrompt(rec.body))
		default:
			u.Prompt = uint64(g.acct.Estimator.Prompt(rec.body))
		}
	}
	if len(rec.delivered) > 0 {
		u.Completion = uint64(g.acct.Estimator.Count(rec.delivered))
	}
	return u
}

// appendAnswerText appends the generated text of a non-stream OpenAI answer
// (each choice's message content, or text for completions) to dst, as raw
// JSON string text like the stream relay collects it, for estimating the
// completion tokens of an answer that came without usage. A Responses API
// answer's text is in its output items (appendOutputText).
func appendAnswerText(dst, answer []byte) []byte {
	dst = appendOutputText(dst, answer)
	gjson.GetBytes(answer, "choices").ForEach(func(_, ch gjson.Result) bool {
		v := ch.Get("message.content")
		if v.Type != gjson.String {
			v = ch.Get("text")
		}
		if v.Type == gjson.String && len(v.Raw) > 2 && len(dst) < maxDelivered {
			dst = append(dst, v.Raw[1:len(v.Raw)-1]...)
		}
		return true
	})
	return dst
}

// eventID is the request's usage event id: the one its begun record
// carries, else a new one.
func (rec *record) eventID() string {
	if rec.begun.EventID != "" {
		return rec.begun.EventID
	}
	return usage.NewEventID(rec.start)
}

// event builds the usage event of a finished request.
func (g *Gateway) event(rec *record, u tokenUsage, estimated bool, cost int64) *usagev1.UsageEvent {
	p := rec.principal
	total := rec.total
	// From the message pool the publisher returns acknowledged events to:
	// reset, with the budget checks of an earlier request to refill.
	ev := usagev1.UsageEventFromVTPool()
	checks := ev.Budgets
	*ev = usagev1.UsageEvent{
		EventId:          rec.eventID(),
		RequestId:        rec.requestID,
		Timestamp:        rec.start.UnixNano(),
		Issuer:           p.Issuer,
		Subject:          p.Subject,
		KeyId:            p.KeyID,
		Dept:             p.Dept,
		Team:             p.Team,
		Project:          p.Project,
		Attempts:         1,
		PromptTokens:     u.Prompt,
		CompletionTokens: u.Completion,
		CachedTokens:     u.Cached,
		CacheWriteTokens: u.CacheWrite,
		ReasoningTokens:  u.Reasoning,
		Estimated:        estimated,
		CostNanoUsd:      cost,
		PricingVersion:   rec.prices.Version,
		ServiceTier:      u.Tier.String(),
		Endpoint:         rec.endpointPath(),
		Stream:           rec.stream,
		StatusCode:       uint32(rec.status),
		ErrorType:        rec.errType,
		ClientAborted:    rec.clientAborted,
		LatencyTotalUs:   uint64(total / time.Microsecond),
		TtftUs:           uint64(rec.ttft / time.Microsecond),
		UpstreamUs:       uint64(rec.upstream / time.Microsecond),
		ClampedMaxTokens: uint32(min(rec.adm.clamp, 1<<31)),
		Units:            rec.units,
		Unit:             rec.unit,
	}
	if rec.upstream > 0 && total > rec.upstream {
		ev.OverheadUs = uint64((total - rec.upstream) / time.Microsecond)
	}
	ev.RequestedModel = rec.model
	if rt := rec.route; rt != nil {
		ev.ServedModel = rt.upstreamModel
		ev.Provider = rt.up.name
		ev.Deployment = rt.deployment
		ev.Route = orDefault(rec.routeName, rt.name)
	}
	if rec.attempts > 0 {
		ev.Attempts = uint32(rec.attempts)
	}
	ev.Fallbacks = rec.fallbacks
	ev.Hedged = rec.hedged
	ev.Budgets = rec.adm.checks.appendEvent(checks[:0])
	ev.DegradationStep = rec.degradation
	if rec.cache != nil && rec.cache.hit {
		ev.CacheHit = true
		ev.ServedModel, ev.Provider = rec.cachedModel, rec.cachedProvider
	}
	return ev
}

// appendEvent appends the checks to dst as usage-event messages, reusing
// the messages dst's backing array holds past its length (a pooled event's,
// reset): no allocation when they are enough, else one for each missing
// message and the array's growth. nil when no limit applied.
func (bc *budgetChecks) appendEvent(dst []*usagev1.BudgetCheck) []*usagev1.BudgetCheck {
	if bc.n == 0 {
		return nil
	}
	for i := range bc.n {
		c := &bc.a[i]
		var m *usagev1.BudgetCheck
		if len(dst) < cap(dst) {
			dst = dst[:len(dst)+1]
			m = dst[len(dst)-1]
		} else {
			dst = append(dst, nil)
		}
		if m == nil {
			m = &usagev1.BudgetCheck{}
			dst[len(dst)-1] = m
		}
		m.Scope, m.Value, m.Period, m.PeriodStart = c.Scope.String(), c.Value, c.Period.String(), c.PeriodStart
		m.FromToken, m.LimitNanoUsd, m.SpentNanoUsd = c.FromToken, c.LimitNano, c.SpentNano
		m.ReservedNanoUsd, m.HeadroomNanoUsd = bc.reserved, c.HeadroomNano()
	}
	return dst
}
