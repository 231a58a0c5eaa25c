// Package gateway is Tollgate's public HTTP front: OpenAI-compatible
// endpoints on fiber that authenticate the caller, pick the model's target
// and relay the provider's answer, streaming chunk by chunk.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/ratelimit"
	"github.com/valyala/fasthttp"
)

// verifier turns a bearer token into a principal.
type verifier interface {
	Verify(token []byte) (*auth.Principal, error)
}

// Options are the gateway's dependencies.
type Options struct {
	Config   *config.Config
	Verifier verifier
	Logger   *slog.Logger
	// Accounting bills and limits requests; its zero value bills nothing.
	Accounting Accounting
}

// Gateway serves the public API. It is safe for concurrent use.
type Gateway struct {
	cfg      *config.Config
	verifier verifier
	log      *slog.Logger
	routes   map[string]*route
	names    []string // model names, sorted, for /v1/models
	app      *fiber.App
	draining atomic.Bool
	// logRequests logs one info line per request (config log.requests).
	logRequests bool
	acct        Accounting
	limiters    [budget.NumScopes]*ratelimit.Limiter // one per scope, so keys need no prefix
}

// route is where one model name is served.
type route struct {
	name          string
	embeddings    bool
	up            *upstream
	upstreamModel string
	deployment    string // provider/upstream-model, in usage events
	// modelJSON replaces the body's model value when the upstream knows
	// the model by another name; nil when the names match.
	modelJSON []byte
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
		verifier:    o.Verifier,
		log:         log,
		routes:      make(map[string]*route, len(o.Config.Models)),
		logRequests: o.Config.Log.Requests,
		acct:        o.Accounting,
	}
	if g.acct.Prices == nil {
		g.acct.Prices = pricing.Default()
	}
	if g.acct.OutputReserve <= 0 {
		g.acct.OutputReserve = 4096
	}
	if g.acct.Reservations == nil {
		g.acct.Reservations = NewReservations()
	}
	if g.acct.Limiter != nil {
		for i := range g.limiters {
			g.limiters[i] = ratelimit.New(ratelimit.Options{})
		}
	}
	ups := make(map[string]*upstream, len(o.Config.Providers))
	for _, p := range o.Config.Providers {
		u, err := newUpstream(p)
		if err != nil {
			return nil, err
		}
		ups[p.Name] = u
	}
	for _, m := range o.Config.Models {
		if len(m.Targets) == 0 {
			return nil, fmt.Errorf("model %s: no targets", m.Name)
		}
		t := m.Targets[0]
		u := ups[t.Provider]
		if u == nil {
			return nil, fmt.Errorf("model %s: unknown provider %q", m.Name, t.Provider)
		}
		r := &route{name: m.Name, embeddings: m.Type == "embeddings", up: u, upstreamModel: t.Model}
		if r.upstreamModel == "" {
			r.upstreamModel = m.Name
		}
		r.deployment = u.name + "/" + r.upstreamModel
		if r.upstreamModel != m.Name {
			r.modelJSON = jsonString(r.upstreamModel)
		}
		g.routes[m.Name] = r
		g.names = append(g.names, m.Name)
	}
	sort.Strings(g.names)
	g.app = g.newApp()
	return g, nil
}

func (g *Gateway) newApp() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:               "tollgate",
		DisableStartupMessage: true,
		BodyLimit:             g.cfg.BodyLimit,
		ReadTimeout:           g.cfg.ReadTimeout,
		IdleTimeout:           g.cfg.IdleTimeout,
		ErrorHandler:          g.handleFiberError,
		// Streams are relayed through the body stream; fiber must not
		// buffer or compress anything.
		DisableDefaultContentType: true,
		ReduceMemoryUsage:         false,
	})
	app.Post("/v1/chat/completions", func(c *fiber.Ctx) error { return g.serve(c, epChat) })
	app.Post("/v1/completions", func(c *fiber.Ctx) error { return g.serve(c, epCompletions) })
	app.Post("/v1/embeddings", func(c *fiber.Ctx) error { return g.serve(c, epEmbeddings) })
	app.Get("/v1/models", g.handleModels)
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

// handleFiberError answers errors raised by fiber itself (body too large,
// unknown route, wrong method) in the OpenAI shape.
func (g *Gateway) handleFiberError(c *fiber.Ctx, err error) error {
	setRequestID(c)
	var fe *fiber.Error
	if !errors.As(err, &fe) {
		g.log.Error("unhandled error", "err", err, "path", c.Path())
		return writeError(c, &apiError{Status: fiber.StatusInternalServerError, Type: typeServer, Message: "internal error"})
	}
	switch fe.Code {
	case fiber.StatusRequestEntityTooLarge:
		return writeError(c, &apiError{Status: fe.Code, Type: typeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("request body is larger than the %d-byte limit", g.cfg.BodyLimit)})
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

func (g *Gateway) handleReady(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	if g.draining.Load() {
		return c.Status(fiber.StatusServiceUnavailable).SendString(`{"status":"draining"}`)
	}
	return c.SendString(`{"status":"ready"}`)
}

// handleModels lists the models the caller's token may use.
func (g *Gateway) handleModels(c *fiber.Ctx) error {
	setRequestID(c)
	p, aerr := g.authenticate(c)
	if aerr != nil {
		return writeError(c, aerr)
	}
	b := append(make([]byte, 0, 64+64*len(g.names)), `{"object":"list","data":[`...)
	n := 0
	for _, name := range g.names {
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
		b = append(b, jsonString(g.routes[name].up.name)...)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}

// authenticate verifies the bearer token of the request.
func (g *Gateway) authenticate(c *fiber.Ctx) (*auth.Principal, *apiError) {
	tok := auth.BearerToken(c.Request().Header.Peek(fiber.HeaderAuthorization))
	if len(tok) == 0 {
		return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "missing_token",
			Message: "missing bearer token: send Authorization: Bearer <JWT>"}
	}
	p, err := g.verifier.Verify(tok)
	if err != nil {
		return nil, &apiError{Status: fiber.StatusUnauthorized, Type: typeAuthentication, Code: "invalid_token",
			Message: err.Error()}
	}
	return p, nil
}
