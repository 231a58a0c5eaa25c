package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/tollgate/tollgate/pkg/router"
	"github.com/tollgate/tollgate/pkg/tokenize"
	"github.com/tollgate/tollgate/pkg/tracing"
	"github.com/valyala/fasthttp"
)

// verifier turns a bearer token into a principal.
type verifier interface {
	Verify(token []byte) (*auth.Principal, error)
}

// readiness is implemented by a verifier whose issuers can lack keys (they
// fetch them from an identity provider); /readyz reports why.
type readiness interface {
	NotReady() []string
}

// Options are the gateway's dependencies.
type Options struct {
	Config   *config.Config
	Verifier verifier
	Logger   *slog.Logger
	// Accounting bills and limits requests; its zero value bills nothing.
	Accounting Accounting
	// Metrics records Prometheus metrics; nil records none.
	Metrics *metrics.Gateway
	// Revocations refuses revoked tokens; nil revokes nothing.
	Revocations revocations
	// Keys verifies API keys (bearer values starting with apikey.Prefix,
	// also accepted in x-api-key); nil refuses every API key.
	Keys verifier
	// Alert publishes a budget alert (degradation steps taken); nil drops them.
	Alert func(subject string, data []byte)
	// Cache is the response cache for models with cache.ttl; nil disables it.
	Cache responseCache
	// Tracer records OpenTelemetry spans; nil records none.
	Tracer *tracing.Tracer
	// Owners keeps the owners of files and batches (*owner.Store); nil
	// refuses the files and batches endpoints (503 owners_unavailable)
	// and every file reference in a request (404).
	Owners owners
}

// revocations says whether a token's key id or subject was revoked.
type revocations interface {
	Revoked(keyID, subject string) bool
}

// Gateway serves the public API. It is safe for concurrent use.
type Gateway struct {
	cfg      *config.Config // the start-up config: listener settings
	state    atomic.Pointer[state]
	log      *slog.Logger
	app      *fiber.App
	draining atomic.Bool
	// logRequests logs one info line per request (config log.requests).
	logRequests bool
	acct        Accounting
	limiters    [budget.NumScopes]*ratelimit.Limiter // one per scope, so keys need no prefix
	metrics     *metrics.Gateway
	revoked     revocations
	keys        verifier
	alert       func(subject string, data []byte)
	cache       responseCache
	tracer      *tracing.Tracer
	owners      owners
	alerts      degradeAlerts
	refused     [len(endpointName)]*metrics.Route // requests that resolved no model, per endpoint
}

// route is where one model name is served.
type route struct {
	name          string
	embeddings    bool
	up            *upstream
	upstreamModel string
	deployment    string                            // provider/upstream-model, in usage events
	metrics       [len(endpointName)]*metrics.Route // per endpoint; nil without metrics
	// modelJSON replaces the body's model value when the upstream knows
	// the model by another name; nil when the names match.
	modelJSON []byte
	// prices, price and priced: routePrice's answer for prices, found once
	// for the routes a state builds (nil prices on a route made for one
	// request), so that admission and billing do not look it up.
	prices *pricing.Table
	price  pricing.Price
	priced bool
}

// New builds a gateway from a validated config.
func New(o Options) (*Gateway, error) {
	if o.Config == nil || o.Verifier == nil {
		return nil, errors.New("gateway: config and verifier are required")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		cfg:         o.Config,
		log:         log,
		logRequests: o.Config.Log.Requests,
		acct:        o.Accounting,
		metrics:     o.Metrics,
		revoked:     o.Revocations,
		keys:        o.Keys,
		alert:       o.Alert,
		cache:       o.Cache,
		tracer:      o.Tracer,
		owners:      o.Owners,
	}
	if g.acct.Prices == nil {
		g.acct.Prices = pricing.Default()
	}
	if g.acct.OutputReserve <= 0 {
		g.acct.OutputReserve = 4096
	}
	if g.acct.Estimator == nil {
		g.acct.Estimator = tokenize.New() // loads its vocabulary on first use
	}
	if g.acct.Limiter != nil {
		for i := range g.limiters {
			g.limiters[i] = ratelimit.New(ratelimit.Options{Share: g.acct.Limiter.Share()})
		}
	}
	if g.metrics != nil {
		for ep := range g.refused {
			g.refused[ep] = g.metrics.Route("", "", endpointName[ep])
		}
	}
	st, err := g.buildState(o.Config, o.Verifier, g.acct.Prices, nil)
	if err != nil {
		return nil, err
	}
	g.state.Store(st)
	g.app = g.newApp()
	return g, nil
}

// state is what a reload replaces. A request loads it once, so in-flight
// requests finish on the state they started with.
type state struct {
	cfg            *config.Config
	verifier       verifier
	router         *router.Router
	ups            []*upstream         // by provider index
	targets        []map[string]*route // by provider index, then upstream model
	routes         map[string]*route   // each model's first target (/v1/messages, pricing)
	names          []string            // model names, sorted, for /v1/models
	prices         *pricing.Table
	rateLimits     []rateRule
	files          *upstream // files_provider: /v1/files and /v1/batches; nil when unset
	refuseUnpriced bool
	ladders        []ladder // budget degradation steps
	priorities     priorities
}

// rateRule is a configured rate limit with its scope parsed once.
type rateRule struct {
	config.RateLimit
	scope budget.Scope
}

// buildState turns a validated config into routes.
func (g *Gateway) buildState(cfg *config.Config, v verifier, prices *pricing.Table, prev *router.Router) (*state, error) {
	st := &state{
		cfg: cfg, verifier: v, routes: make(map[string]*route, len(cfg.Models)), prices: prices,
		ups: make([]*upstream, len(cfg.Providers)), targets: make([]map[string]*route, len(cfg.Providers)),
		ladders: buildLadders(cfg), priorities: newPriorities(cfg.Priority), refuseUnpriced: cfg.Usage.UnpricedModel == config.UnpricedRefuse,
	}
	for _, rl := range cfg.RateLimits {
		sc, err := budget.ParseScope(rl.Scope)
		if err != nil {
			return nil, fmt.Errorf("rate limit: %w", err)
		}
		st.rateLimits = append(st.rateLimits, rateRule{RateLimit: rl, scope: sc})
	}
	ups := make(map[string]int, len(cfg.Providers))
	for i, p := range cfg.Providers {
		u, err := newUpstream(p)
		if err != nil {
			return nil, err
		}
		ups[p.Name] = i
		st.ups[i] = u
		if p.Name == cfg.FilesProvider {
			st.files = u
		}
		st.targets[i] = map[string]*route{}
	}
	rt, err := router.New(cfg, router.Options{Previous: prev, OnState: g.onCircuit})
	if err != nil {
		return nil, err
	}
	st.router = rt
	for _, m := range cfg.Models {
		if len(m.Targets) == 0 {
			return nil, fmt.Errorf("model %s: no targets", m.Name)
		}
		for ti, t := range m.Targets {
			pi, ok := ups[t.Provider]
			if !ok {
				return nil, fmt.Errorf("model %s: unknown provider %q", m.Name, t.Provider)
			}
			model := t.Model
			if model == "" {
				model = m.Name
			}
			r := st.targets[pi][model]
			if r == nil && !strings.Contains(model, "*") {
				r = g.newRoute(m.Name, m.Type == config.ModelTypeEmbeddings, st.ups[pi], model)
				if prices != nil {
					r.price, r.priced = findPrice(prices, r)
					r.prices = prices
				}
				st.targets[pi][model] = r
			}
			if ti == 0 && r != nil {
				st.routes[m.Name] = r
			}
		}
		if !strings.Contains(m.Name, "*") {
			st.names = append(st.names, m.Name)
		}
	}
	sort.Strings(st.names)
	return st, nil
}

// newRoute describes one target: a provider and its name for a model.
func (g *Gateway) newRoute(name string, embeddings bool, u *upstream, model string) *route {
	r := &route{name: name, embeddings: embeddings, up: u, upstreamModel: model, deployment: u.name + "/" + model,
		modelJSON: jsonString(model)}
	if g.metrics != nil {
		for ep := range r.metrics {
			r.metrics[ep] = g.metrics.Route(name, u.name, endpointName[ep])
		}
	}
	return r
}

// target returns the route of an attempt: prebuilt for configured
// targets, made for the request when a wildcard passed a model through.
func (st *state) target(g *Gateway, a *router.Attempt, ep endpoint) *route {
	if r := st.targets[a.ProviderIndex][a.Model]; r != nil {
		return r
	}
	return g.newRoute(a.Route, ep == epEmbeddings, st.ups[a.ProviderIndex], a.Model)
}

// priceRoute is the route whose model prices the admission estimate: the
// requested model's first target, or for a wildcard the requested name.
func (st *state) priceRoute(rr *router.Route, requested string) *route {
	if r := st.routes[rr.Name()]; r != nil {
		return r
	}
	return &route{name: requested, upstreamModel: requested}
}

// onCircuit feeds circuit transitions to the metrics.
func (g *Gateway) onCircuit(target string, s router.State) {
	if g.metrics != nil {
		g.metrics.SetCircuit(target, metrics.CircuitState(s))
	}
}

// Reload applies a new validated config to new requests: routes,
// providers, keys, prices, rate limits and token issuers. Requests in
// flight finish on the old state. Settings of the listener itself (listen,
// body_limit, read_timeout, idle_timeout) need a restart.
func (g *Gateway) Reload(cfg *config.Config, v verifier, prices *pricing.Table) error {
	if prices == nil {
		prices = g.acct.Prices
	}
	st, err := g.buildState(cfg, v, prices, g.state.Load().router)
	if err != nil {
		return err
	}
	g.state.Store(st)
	return nil
}

// needsRestart lists what of cfg this gateway cannot apply by a reload
// beyond the config.Restart keys: a models[].cache.ttl when the response
// cache was not started, or one above its bucket's TTL (the longest at
// start), which the bucket would cut short.
func (g *Gateway) needsRestart(cfg *config.Config) []string {
	var out []string
	for i, m := range cfg.Models {
		switch {
		case m.Cache.TTL <= 0:
		case g.cache == nil:
			out = append(out, fmt.Sprintf("models[%d].cache.ttl (no model had a cache.ttl at start, so the response cache is off)", i))
		case m.Cache.TTL > g.cache.TTL():
			out = append(out, fmt.Sprintf("models[%d].cache.ttl (%s is above the cache bucket's TTL %s, the longest at start)", i, m.Cache.TTL, g.cache.TTL()))
		}
	}
	return out
}

// Prices returns the price table requests are billed with now (the
// embedded one, a price book, config prices; a reload replaces it).
func (g *Gateway) Prices() *pricing.Table { return g.state.Load().prices }

// Routes describes the current routes and the state of every target
// (circuit, latency, in-flight), for the admin API.
func (g *Gateway) Routes() Routes {
	st := g.state.Load()
	var out Routes
	for _, rr := range st.router.Routes() {
		info := RouteInfo{Model: rr.Name(), Type: rr.Type(), Embeddings: rr.Embeddings(), Fallbacks: rr.Fallbacks()}
		for _, t := range rr.Config().Targets {
			info.Targets = append(info.Targets, t.Provider+"/"+orDefault(t.Model, rr.Name()))
		}
		out.Models = append(out.Models, info)
	}
	out.Targets = st.router.Snapshot()
	return out
}

// Routes is the admin API's view of routing.
type Routes struct {
	Models  []RouteInfo          `json:"models"`
	Targets []router.TargetState `json:"targets"`
}

// RouteInfo is one model's route as the admin API shows it.
type RouteInfo struct {
	Model string `json:"model"`
	// Type is the kind of endpoint the model serves (models[].type).
	Type       string   `json:"type"`
	Embeddings bool     `json:"embeddings"`
	Targets    []string `json:"targets"`
	Fallbacks  []string `json:"fallbacks,omitempty"`
}

func (g *Gateway) newApp() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:               "tollgate",
		DisableStartupMessage: true,
		BodyLimit:             g.cfg.BodyLimit,
		ReadTimeout:           g.cfg.ReadTimeout,
		IdleTimeout:           g.cfg.IdleTimeout,
		ErrorHandler:          g.handleFiberError,
		// A whole non-stream answer; a stream extends it per write (relay.armWrite).
		WriteTimeout: g.cfg.WriteTimeout,
		// The read buffer is also the limit of request line and headers (431).
		ReadBufferSize: g.cfg.MaxHeaderBytes,
		// Streams are relayed through the body stream; fiber must not
		// buffer or compress anything.
		DisableDefaultContentType: true,
		// A connection gives its write buffer and body buffers back after
		// each response instead of keeping them while idle: hundreds of
		// idle keep-alive connections otherwise hold 4 KiB or more each,
		// and a large body's buffer until the connection closes. Large
		// bodies get pooled buffers of their own (bodybuf.go). The read
		// buffer stays: request bodies stream.
		ReduceMemoryUsage: true,
		// Request bodies stream: uploads pass through unheld, and limitBody
		// holds every other body to BodyLimit (passthrough.go).
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
	})
	parseError := app.Server().ErrorHandler
	app.Server().ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) { parseError(ctx, scrubParseError(err)) }
	app.Use(g.limitBody)
	app.Post("/v1/chat/completions", func(c *fiber.Ctx) error { return g.serve(c, epChat) })
	app.Post("/v1/completions", func(c *fiber.Ctx) error { return g.serve(c, epCompletions) })
	app.Post("/v1/embeddings", func(c *fiber.Ctx) error { return g.serve(c, epEmbeddings) })
	app.Post("/v1/responses", func(c *fiber.Ctx) error { return g.serve(c, epResponses) })
	app.Post("/v1/messages", g.serveMessages)
	app.Post("/v1/messages/count_tokens", g.serveCountTokens)
	app.Get("/v1/models", g.handleModels)
	app.Post("/v1beta/models/*", g.serveGemini)
	app.Get("/v1beta/models", g.handleGeminiModels)
	app.Get("/v1beta/models/*", g.handleGeminiModels)
	g.registerPassthrough(app)
	app.Get("/healthz", g.handleHealth)
	app.Get("/readyz", g.handleReady)
	return app
}

// App returns the fiber app, for tests and for listening.
func (g *Gateway) App() *fiber.App { return g.app }

// Handler returns the gateway as a plain fasthttp handler.
func (g *Gateway) Handler() fasthttp.RequestHandler { return g.app.Handler() }

// Serve serves on ln until Shutdown.
func (g *Gateway) Serve(ln net.Listener) error { return g.app.Listener(ln) }

// Shutdown stops accepting connections, marks the gateway not ready and
// waits for in-flight requests and streams to finish until ctx is done.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.draining.Store(true)
	deadline, ok := ctx.Deadline()
	if !ok {
		return g.app.Shutdown()
	}
	return g.app.ShutdownWithTimeout(time.Until(deadline))
}

// errMalformedRequest replaces the error of a request line or header that
// could not be parsed.
var errMalformedRequest = errors.New("malformed HTTP request: the request line or a header could not be parsed")

// errBodyCutShort replaces the error of a body that ended before its
// Content-Length within the bytes fasthttp reads with the headers.
var errBodyCutShort = errors.New("read request body: unexpected EOF: the body ended before its Content-Length")

// scrubParseError is err, an error of fasthttp reading a request, when fiber
// maps it to an answer of its own (431, 408, 413, 405), else
// errMalformedRequest: fasthttp's parse errors quote the bytes they could
// not parse, request line and headers with them, and fiber would answer
// them back, bearer token included (issue 41, finding 11).
func scrubParseError(err error) error {
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.As(err, &small), errors.As(err, &netErr),
		errors.Is(err, fasthttp.ErrBodyTooLarge), errors.Is(err, fasthttp.ErrGetOnly):
		return err
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errBodyCutShort
	}
	return errMalformedRequest
}

// handleFiberError answers errors raised by fiber itself (body too large,
// unknown route, wrong method) in the OpenAI shape, and in the Anthropic
// shape on the Messages endpoints (Claude Code's first request alone is
// tens of kilobytes).
func (g *Gateway) handleFiberError(c *fiber.Ctx, err error) error {
	setRequestID(c)
	writeError := writeError
	switch p := c.Path(); {
	case strings.HasPrefix(p, "/v1/messages"):
		writeError = writeAnthropicError
	case strings.HasPrefix(p, geminiPrefix):
		writeError = writeGeminiError
	}
	var fe *fiber.Error
	if !errors.As(err, &fe) {
		g.log.Error("unhandled error", "err", err, "path", c.Path())
		return writeError(c, &apiError{Status: fiber.StatusInternalServerError, Type: typeServer, Message: "internal error"})
	}
	switch fe.Code {
	case fiber.StatusRequestEntityTooLarge:
		return writeError(c, &apiError{Status: fe.Code, Type: typeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("request body is larger than the %d-byte limit", g.cfg.BodyLimit)})
	case fiber.StatusRequestHeaderFieldsTooLarge:
		return writeError(c, &apiError{Status: fe.Code, Type: typeInvalidRequest, Code: "headers_too_large",
			Message: fmt.Sprintf("request line and headers are larger than the %d-byte limit", g.cfg.MaxHeaderBytes)})
	case fiber.StatusNotFound:
		return writeError(c, &apiError{Status: fe.Code, Type: typeNotFound, Code: "unknown_url",
			Message: fmt.Sprintf("unknown request URL: %s %s", c.Method(), c.Path())})
	case fiber.StatusMethodNotAllowed:
		return writeError(c, &apiError{Status: fe.Code, Type: typeInvalidRequest, Code: "method_not_allowed",
			Message: fmt.Sprintf("method %s is not allowed on %s", c.Method(), c.Path())})
	default:
		t := typeInvalidRequest
		if fe.Code >= 500 {
			t = typeServer
		}
		return writeError(c, &apiError{Status: fe.Code, Type: t, Message: fe.Message})
	}
}

func (g *Gateway) handleHealth(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.SendString(`{"status":"ok"}`)
}

// ErrDraining is Ready's answer while the gateway drains for shutdown.
var ErrDraining = errors.New("draining for shutdown")

// NotReadyError is Ready's answer when an auth issuer has no keys: its
// tokens would all be refused.
type NotReadyError struct {
	// Reasons say, one per issuer, why it cannot verify.
	Reasons []string
}

func (e *NotReadyError) Error() string { return "not ready: " + strings.Join(e.Reasons, "; ") }

// Ready reports whether the gateway serves new requests: nil, ErrDraining,
// or a *NotReadyError. The public /readyz and the admin listener's /readyz
// answer from it, so a probe of either port sees the same readiness.
func (g *Gateway) Ready() error {
	if g.draining.Load() {
		return ErrDraining
	}
	if r, ok := g.state.Load().verifier.(readiness); ok {
		if why := r.NotReady(); len(why) > 0 {
			return &NotReadyError{Reasons: why}
		}
	}
	return nil
}

func (g *Gateway) handleReady(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	var nr *NotReadyError
	switch err := g.Ready(); {
	case err == nil:
		return c.SendString(`{"status":"ready"}`)
	case errors.As(err, &nr):
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"status": "not ready", "reasons": nr.Reasons})
	default:
		return c.Status(fiber.StatusServiceUnavailable).SendString(`{"status":"draining"}`)
	}
}

// handleModels lists the models the caller's token may use.
func (g *Gateway) handleModels(c *fiber.Ctx) error {
	setRequestID(c)
	st := g.state.Load()
	p, aerr := g.authenticate(c, st)
	if aerr != nil {
		return writeError(c, aerr)
	}
	b := append(make([]byte, 0, 64+64*len(st.names)), `{"object":"list","data":[`...)
	n := 0
	for _, name := range st.names {
		if !p.AllowsModel(name) {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"id":`...)
		b = append(b, jsonString(name)...)
		b = append(b, `,"object":"model","created":0,"owned_by":`...)
		b = append(b, jsonString(st.routes[name].up.name)...)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}

// authenticate verifies the bearer token of the request: an API key
// (apikey.Prefix, from Authorization or x-api-key) against the key table,
// anything else against the JWT issuers.
func (g *Gateway) authenticate(c *fiber.Ctx, st *state) (*auth.Principal, *apiError) {
	h := &c.Request().Header
	tok := auth.BearerToken(h.Peek(fiber.HeaderAuthorization))
	if len(tok) == 0 {
		if k := h.Peek("x-api-key"); apikey.HasPrefix(k) {
			tok = k
		}
	}
	if len(tok) == 0 {
		return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "missing_token",
			Message: "missing bearer token: send Authorization: Bearer <JWT or API key>"}
	}
	var p *auth.Principal
	if apikey.HasPrefix(tok) {
		var aerr *apiError
		if p, aerr = g.verifyKey(tok); aerr != nil {
			return nil, aerr
		}
	} else {
		var err error
		if p, err = st.verifier.Verify(tok); err != nil {
			return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "invalid_token",
				Message: err.Error()}
		}
	}
	if g.revoked != nil && g.revoked.Revoked(p.KeyID, p.Subject) {
		return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "token_revoked",
			Message: "invalid token: the token has been revoked"}
	}
	return p, nil
}

// verifyKey checks an API key: 401 key_revoked for a revoked key, 401
// invalid_api_key for any other refusal.
func (g *Gateway) verifyKey(tok []byte) (*auth.Principal, *apiError) {
	if g.keys == nil {
		return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "invalid_api_key",
			Message: "invalid api key: API keys are not enabled on this gateway"}
	}
	p, err := g.keys.Verify(tok)
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, apikey.ErrRevoked):
		return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "key_revoked", Message: err.Error()}
	default:
		return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "invalid_api_key", Message: err.Error()}
	}
}
