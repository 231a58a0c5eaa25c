// Package admin serves the operator listener, separate from the public one:
// health and readiness probes, Prometheus metrics, pprof, and the /admin/
// endpoints that show the running config, routes and budgets and reload the
// config. It is net/http based; nothing here is on the request hot path.
//
// # Endpoints
//
//	GET  /healthz          200 while the process runs
//	GET  /readyz           200 when Options.Ready returns nil, else 503
//	GET  /metrics          Prometheus exposition of Options.Gatherer
//	GET  /debug/pprof/...  net/http/pprof (index, cmdline, profile, symbol, trace, named profiles)
//	GET  /admin/config     the running config as JSON, secrets redacted
//	GET  /admin/routes     Options.Routes() as JSON
//	GET  /admin/budgets    Options.Budgets() as JSON
//	POST /admin/reload     Options.Reload: 200 with its summary, 400 with its error
//	POST /admin/revoke     {"jti":ID} or {"sub":SUBJECT}, optional "reason":
//	                       Options.Revoke; 200, 400 for a bad body
//	POST /admin/unrevoke   {"jti":ID} or {"sub":SUBJECT}: Options.Unrevoke
//	GET  /admin/usage/{request_id}
//	                       Options.Usage: how one request was charged (principal,
//	                       route and fallbacks, tokens, prices, cost, budgets checked
//	                       with their headroom); 404 when no event has the id
//	GET    /admin/keys     Options.Keys: every API key (principal, name, created
//	                       by and when, rotated, revoked), never a secret or hash
//	POST   /admin/keys     create a key from a JSON body {"sub","dept","team",
//	                       "project","models","budgets","rpm","tpm","priority",
//	                       "expires_at","name"}: 201 with the key's record and, this once,
//	                       its token in "key"
//	POST   /admin/keys/{id}/rotate
//	                       a new secret for the key: 200 with the new token in "key"
//	DELETE /admin/keys/{id}
//	                       revoke the key: 200 with its record; 404 unknown id
//	GET/POST /ui/...       Options.Console, the web console (pkg/console): it
//	                       signs its users in by itself (never the admin token);
//	                       the Host and cross-origin checks below apply to it
//
// Every /admin/ and /debug/ endpoint has an action of pkg/access, and the
// guard lets a request through only when its role may perform it: the
// same table the console enforces. An open listener's caller and an admin
// token are the role admin, which may do everything.
//
// # Access
//
// /healthz, /readyz and /metrics are always open: probes and scrapers must
// reach them without credentials, and they reveal nothing sensitive.
// Everything under /admin/ and /debug/ is open only when the listener is
// bound to a loopback address (127.0.0.0/8 or ::1) and RequireToken is
// false. Otherwise a request needs "Authorization: Bearer <JWT>" whose
// verified principal has the admin claim: 401 without a valid token, 403
// without the claim. Set RequireToken when a local proxy or a shared network
// namespace (a Kubernetes pod's sidecars) makes loopback reachable by others.
//
// Web pages cannot drive the listener (issue 41, finding 4): a browser
// sends no bearer token by itself, but an open loopback listener needs
// none, so every /admin/ and /debug/ request is also checked, token or not:
//
//   - Host must name this listener: a loopback IP, "localhost", the host of
//     the listen address, an IP of the listener (any IP when it is bound to
//     a wildcard address), or one of Options.AllowedHosts; otherwise 403
//     host_not_allowed. A DNS rebinding page sends its own name.
//   - A request other than GET, HEAD or OPTIONS that a browser marks as
//     cross-origin (Sec-Fetch-Site other than same-origin or none, or an
//     Origin whose host is not the Host) gets 403 cross_site_request.
//     Clients that send neither header (curl, scripts) pass.
//   - A request other than GET, HEAD or OPTIONS must carry
//     "Content-Type: application/json", or no Content-Type and no body;
//     anything else (an HTML form's text/plain, urlencoded or multipart
//     body) gets 415 unsupported_media_type.
//
// # Audit
//
// Reload, Revoke and Unrevoke run with the actor in their ctx
// (audit.Actor): the admin token's subject, or "loopback" on an open
// listener without a valid admin token. When the change is made but its
// audit event is not stored (an error wrapping audit.ErrNotRecorded), the
// answer is still 200, with the reason in "audit_error", and a warning is
// logged.
//
// Every error is a JSON body {"error":{"message":"...","type":"..."}}.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

// DefaultAddr is the admin listener's default address: loopback only.
const DefaultAddr = "127.0.0.1:9090"

// Options configure a Server. Every func may be nil: the endpoint it feeds
// then answers 404 (not_configured), except Ready (nil: always ready).
type Options struct {
	// Gatherer is served on /metrics, usually the *prometheus.Registry the
	// metrics were registered on.
	Gatherer prometheus.Gatherer
	// Verify checks a bearer token on /admin/ and /debug/ when the listener
	// is not loopback or RequireToken is set; pass (*auth.Verifier).Verify.
	// Without it those endpoints refuse every request in that case.
	Verify func(token []byte) (*auth.Principal, error)
	// RequireToken requires an admin token even on a loopback listener.
	// SetRequireToken changes it on a running Server (a config reload).
	RequireToken bool
	// AllowedHosts are further names the Host header of an /admin/ or
	// /debug/ request may carry (case-insensitive, port ignored), such as a
	// Kubernetes Service name; see the package documentation for the names
	// always accepted.
	AllowedHosts []string
	// Ready reports readiness for /readyz: nil when ready, else why not.
	Ready func() error
	// Config returns the running config for /admin/config; called on every
	// request, so a reload shows at once. The result is not modified.
	Config func() *config.Config
	// Routes returns the route and circuit state for /admin/routes; the
	// value is encoded with encoding/json.
	Routes func() any
	// Budgets returns the budget state for /admin/budgets; the value is
	// encoded with encoding/json.
	Budgets func() any
	// Reload reloads the config for POST /admin/reload and returns a summary
	// (encoded with encoding/json) or the reason it refused, such as a
	// validation error. Calls are serialized. Its ctx is not cancelled when
	// the caller hangs up, so a reload is never abandoned half way.
	Reload func(ctx context.Context) (summary any, err error)
	// Revoke revokes a token for POST /admin/revoke: kind is "jti" or
	// "sub". Pass (*revoke.Revoker).Revoke with audit.Actor(ctx).
	Revoke func(ctx context.Context, kind, value, reason string) error
	// Unrevoke removes a revocation for POST /admin/unrevoke.
	Unrevoke func(ctx context.Context, kind, value string) error
	// Usage explains one request for GET /admin/usage/{request_id}: the
	// value (encoded with encoding/json), or found false for a 404. The
	// gateway passes (*billing.Explainer).Lookup, reading the usage stream
	// or ClickHouse.
	Usage func(ctx context.Context, requestID string) (v any, found bool, err error)
	// Keys serves /admin/keys: the gateway passes the *apikey.Store of
	// apikey.Start.
	Keys keyStore
	// Console is the web console (pkg/console), served under /ui/ after
	// the Host and cross-origin checks; nil serves no console.
	Console http.Handler
	// Logger receives reloads, refused admin requests (debug) and metrics
	// gathering errors. Default: discard.
	Logger *slog.Logger
}

// Server is the admin HTTP server. It serves one listener.
type Server struct {
	o    Options
	log  *slog.Logger
	srv  *http.Server
	open atomic.Bool // /admin/ and /debug/ need no token: loopback && !requireToken

	accessMu     sync.Mutex // guards loopback and requireToken, and serializes writes of open
	loopback     bool       // the listener is on a loopback address; set by Serve
	requireToken bool

	// listenHost is the host of the address Start listened on ("" from
	// New); hosts is what the Host header may name, set by Serve before it
	// serves and read-only afterwards.
	listenHost string
	addr       net.Addr // the listener's address; set by Start
	hosts      hostSet
	cop        *http.CrossOriginProtection

	reloadMu sync.Mutex // serializes Options.Reload
}

// New returns a Server for o. Start it with Serve.
func New(o Options) *Server {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, log: log, requireToken: o.RequireToken, cop: http.NewCrossOriginProtection()}
	s.srv = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// No WriteTimeout: /debug/pprof/profile and /trace stream for as
		// many seconds as asked.
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s
}

// Off is the admin.listen value that disables the listener.
const Off = "off"

// Start listens on addr and serves o on it in a goroutine until Shutdown;
// an error serving is logged to o.Logger. It returns a nil Server when
// addr is Off.
func Start(addr string, o Options) (*Server, error) {
	if addr == Off {
		return nil, nil
	}
	s := New(o)
	s.listenHost, _, _ = net.SplitHostPort(addr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listen %s: %w", addr, err)
	}
	s.addr = ln.Addr()
	go func() {
		if err := s.Serve(ln); err != nil {
			s.log.Error("admin listener stopped", "err", err)
		}
	}()
	s.log.Info("admin listening", "addr", ln.Addr().String())
	return s, nil
}

// Addr is the address Start listens on, or nil for a Server made by New.
func (s *Server) Addr() net.Addr { return s.addr }

// Serve serves ln until Shutdown, then returns nil. Whether /admin/ and
// /debug/ need a token is decided from ln's address (see the package
// documentation).
func (s *Server) Serve(ln net.Listener) error {
	s.accessMu.Lock()
	s.loopback = isLoopback(ln.Addr())
	s.open.Store(s.loopback && !s.requireToken)
	s.accessMu.Unlock()
	s.hosts = newHostSet(ln.Addr(), s.listenHost, s.o.AllowedHosts)
	if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve admin: %w", err)
	}
	return nil
}

// SetRequireToken turns the token requirement of a loopback listener on
// or off (Options.RequireToken) for the requests that follow, so that a
// config reload setting admin.require_token closes the admin API at once.
// A listener off loopback always requires a token.
func (s *Server) SetRequireToken(on bool) {
	s.accessMu.Lock()
	defer s.accessMu.Unlock()
	s.requireToken = on
	s.open.Store(s.loopback && !on)
}

// Shutdown stops accepting connections and waits, up to ctx, for requests
// in progress (a running pprof profile included) to end.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down admin: %w", err)
	}
	return nil
}

// isLoopback reports whether addr is a TCP address on a loopback IP.
// Wildcard binds (0.0.0.0, ::) and other networks are not.
func isLoopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// routes builds the private mux; net/http/pprof's handlers are mounted on
// it explicitly and http.DefaultServeMux is never served.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", readOnly(http.HandlerFunc(s.healthz)))
	mux.Handle("/readyz", readOnly(http.HandlerFunc(s.readyz)))
	mux.Handle("/metrics", readOnly(s.metrics()))

	mux.Handle("/debug/pprof/", s.guard(always(access.Debug), http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/cmdline", s.guard(always(access.Debug), http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("/debug/pprof/profile", s.guard(always(access.Debug), http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/symbol", s.guard(always(access.Debug), http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", s.guard(always(access.Debug), http.HandlerFunc(pprof.Trace)))
	mux.Handle("/debug/", s.guard(always(access.Debug), http.HandlerFunc(notFound)))

	mux.Handle("/admin/config", s.guard(always(access.ConfigView), readOnly(http.HandlerFunc(s.config))))
	mux.Handle("/admin/routes", s.guard(always(access.ModelsView), readOnly(s.snapshot("routes", s.o.Routes))))
	mux.Handle("/admin/budgets", s.guard(always(access.BudgetsView), readOnly(s.snapshot("budgets", s.o.Budgets))))
	mux.Handle("/admin/reload", s.guard(always(access.Reload), http.HandlerFunc(s.reload)))
	mux.Handle("/admin/revoke", s.guard(always(access.Revoke), http.HandlerFunc(s.revoke(false))))
	mux.Handle("/admin/unrevoke", s.guard(always(access.Revoke), http.HandlerFunc(s.revoke(true))))
	mux.Handle("/admin/usage/{request_id...}", s.guard(always(access.RequestsView), readOnly(http.HandlerFunc(s.usage))))
	mux.Handle("/admin/keys", s.guard(keysAction, http.HandlerFunc(s.keys)))
	mux.Handle("/admin/keys/{id}", s.guard(always(access.KeysManage), http.HandlerFunc(s.key)))
	mux.Handle("/admin/keys/{id}/rotate", s.guard(always(access.KeysManage), http.HandlerFunc(s.rotateKey)))
	mux.Handle("/admin/", s.guard(always(access.ConfigView), http.HandlerFunc(notFound)))

	if s.o.Console != nil {
		mux.Handle("/ui/", s.site(s.o.Console))
		mux.Handle("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	}

	mux.HandleFunc("/", notFound)
	return mux
}

// principalKey is the context key of the admin principal of a request.
type principalKey struct{}

// always is the action of an endpoint whatever the method.
func always(action string) func(*http.Request) string {
	return func(*http.Request) string { return action }
}

// keysAction is the action of /admin/keys: listing or creating.
func keysAction(r *http.Request) string {
	if safeMethod(r.Method) {
		return access.KeysView
	}
	return access.KeysManage
}

// guard lets a request through when it is not a browser's cross-site
// request (checkBrowser), and the listener is open or it carries a bearer
// token whose principal is an admin, and that role may perform the
// endpoint's action (pkg/access, the table the console enforces too).
// Both an open listener's caller and an admin token are the role
// access.Admin.
func (s *Server) guard(action func(*http.Request) string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.checkBrowser(w, r) {
			return
		}
		if s.open.Load() {
			s.allow(w, r, access.Admin, action, h)
			return
		}
		tok := auth.BearerToken([]byte(r.Header.Get("Authorization")))
		if tok == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-admin"`)
			s.refuse(w, r, http.StatusUnauthorized, "unauthorized", "an admin bearer token is required")
			return
		}
		if s.o.Verify == nil {
			s.refuse(w, r, http.StatusForbidden, "forbidden", "admin endpoints are disabled on this listener: no token verifier is configured")
			return
		}
		p, err := s.o.Verify(tok)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-admin", error="invalid_token"`)
			s.refuse(w, r, http.StatusUnauthorized, "unauthorized", err.Error())
			return
		}
		if !p.Admin {
			s.refuse(w, r, http.StatusForbidden, "forbidden", "the token has no admin claim")
			return
		}
		s.allow(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)), access.Admin, action, h)
	})
}

// allow serves r with h when role may perform the endpoint's action.
func (s *Server) allow(w http.ResponseWriter, r *http.Request, role string, action func(*http.Request) string, h http.Handler) {
	if a := action(r); !access.Allowed(role, a, "", "") {
		s.refuse(w, r, http.StatusForbidden, "forbidden", "the role "+role+" may not "+a)
		return
	}
	h.ServeHTTP(w, r)
}

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, typ, msg string) {
	s.log.Debug("admin request refused", "path", r.URL.Path, "remote", r.RemoteAddr, "status", status, "reason", msg)
	writeError(w, status, typ, msg)
}

// readOnly answers 405 to methods other than GET and HEAD.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.o.Ready != nil {
		if err := s.o.Ready(); err != nil {
			writeError(w, http.StatusServiceUnavailable, "not_ready", err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) metrics() http.Handler {
	if s.o.Gatherer == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusNotFound, "not_configured", "no metrics registry is configured")
		})
	}
	return promhttp.HandlerFor(s.o.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      promLogger{s.log},
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// promLogger passes promhttp's gathering errors to slog.
type promLogger struct{ log *slog.Logger }

// Println implements promhttp.Logger.
func (l promLogger) Println(v ...any) { l.log.Warn("metrics", "error", fmt.Sprint(v...)) }

func (s *Server) config(w http.ResponseWriter, _ *http.Request) {
	if s.o.Config == nil {
		writeError(w, http.StatusNotFound, "not_configured", "the config is not available")
		return
	}
	c := s.o.Config()
	if c == nil {
		writeError(w, http.StatusServiceUnavailable, "not_ready", "no config is loaded")
		return
	}
	v, err := Redact(c)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) snapshot(what string, f func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if f == nil {
			writeError(w, http.StatusNotFound, "not_configured", what+" are not available")
			return
		}
		writeJSON(w, http.StatusOK, f())
	})
}

func (s *Server) reload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST to reload")
		return
	}
	if s.o.Reload == nil {
		writeError(w, http.StatusNotFound, "not_configured", "reload is not available")
		return
	}
	who := s.actor(r)
	s.reloadMu.Lock()
	summary, err := s.o.Reload(s.actorContext(r, who))
	s.reloadMu.Unlock()
	body := map[string]any{"status": "reloaded", "summary": summary}
	switch {
	case errors.Is(err, audit.ErrNotRecorded):
		s.log.Warn("config reloaded but not audited", "by", who, "error", err)
		body["audit_error"] = err.Error()
	case err != nil:
		s.log.Warn("config reload refused", "by", who, "error", err)
		writeError(w, http.StatusBadRequest, "invalid_config", err.Error())
		return
	default:
		s.log.Info("config reloaded", "by", who)
	}
	writeJSON(w, http.StatusOK, body)
}

// actor is who makes an admin request: the subject of its verified admin
// token (also on an open listener, when one is sent), else "loopback".
func (s *Server) actor(r *http.Request) string {
	if p, ok := r.Context().Value(principalKey{}).(*auth.Principal); ok {
		return p.Subject
	}
	if tok := auth.BearerToken([]byte(r.Header.Get("Authorization"))); tok != nil && s.o.Verify != nil {
		if p, err := s.o.Verify(tok); err == nil && p.Admin && p.Subject != "" {
			return p.Subject
		}
	}
	return "loopback"
}

// revokeBody is the body of POST /admin/revoke and /admin/unrevoke.
type revokeBody struct {
	JTI    string `json:"jti"`
	Sub    string `json:"sub"`
	Reason string `json:"reason"`
}

// revoke serves POST /admin/revoke (undo false) and /admin/unrevoke.
func (s *Server) revoke(undo bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
			return
		}
		if (undo && s.o.Unrevoke == nil) || (!undo && s.o.Revoke == nil) {
			writeError(w, http.StatusNotFound, "not_configured", "revocation is not available")
			return
		}
		var b revokeBody
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil || (b.JTI == "") == (b.Sub == "") {
			writeError(w, http.StatusBadRequest, "invalid_request", `give exactly one of "jti" or "sub"`)
			return
		}
		kind, value := "jti", b.JTI
		if b.Sub != "" {
			kind, value = "sub", b.Sub
		}
		who := s.actor(r)
		ctx := s.actorContext(r, who)
		status, err := "revoked", error(nil)
		if undo {
			status, err = "unrevoked", s.o.Unrevoke(ctx, kind, value)
		} else {
			err = s.o.Revoke(ctx, kind, value, b.Reason)
		}
		body := map[string]any{"status": status, "kind": kind, "value": value}
		switch {
		case errors.Is(err, audit.ErrNotRecorded):
			s.log.Warn("revocation change not audited", "by", who, "kind", kind, "value", value, "error", err)
			body["audit_error"] = err.Error()
		case err != nil:
			s.log.Warn("revocation change failed", "by", who, "kind", kind, "value", value, "error", err)
			writeError(w, http.StatusServiceUnavailable, "revoke_failed", err.Error())
			return
		default:
			s.log.Info("revocation changed", "by", who, "status", status, "kind", kind, "value", value)
		}
		writeJSON(w, http.StatusOK, body)
	}
}

// maxRequestID is the longest request id the gateway keeps (docs/endpoints.md).
const maxRequestID = 128

func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	if s.o.Usage == nil {
		writeError(w, http.StatusNotFound, "not_configured", "usage lookups are not available")
		return
	}
	id := r.PathValue("request_id")
	if id == "" || len(id) > maxRequestID {
		writeError(w, http.StatusBadRequest, "invalid_request_id", "give a request id of 1 to 128 characters: /admin/usage/{request_id}")
		return
	}
	v, found, err := s.o.Usage(r.Context(), id)
	switch {
	case err != nil:
		s.log.Warn("usage lookup", "request_id", id, "error", err)
		writeError(w, http.StatusServiceUnavailable, "lookup_failed", err.Error())
	case !found:
		writeError(w, http.StatusNotFound, "not_found", "no usage event for request "+id)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
}

// errorBody is the JSON shape of every error.
type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	var b errorBody
	b.Error.Message, b.Error.Type = msg, typ
	writeJSON(w, status, b)
}

// writeJSON writes v indented; a value that cannot be encoded becomes a 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"message":"encode response","type":"internal_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
