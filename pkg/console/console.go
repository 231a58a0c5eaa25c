// Package console is Tollgate's web console: server-rendered html/template
// pages under /ui/ on the admin listener, with htmx for interaction and
// uPlot for charts, both vendored under static/vendor and embedded.
//
// # Who may see what
//
// A user signs in through the configured OpenID Provider (oidc.go) or,
// on a loopback admin listener, with the one-time link the gateway prints
// at start (link.go). The session (session.go) holds a User; every page
// and every action is registered with an access action (pkg/access) and
// refused with a 403 page when the user's role may not perform it. A
// handler checks department scopes of its own with Console.Allowed.
//
// # Security
//
// Every answer carries a strict Content-Security-Policy (no inline script
// or style: page code is static/*.js), frame-ancestors 'none',
// X-Content-Type-Options, Referrer-Policy no-referrer, and pages
// Cache-Control no-store (security.go). The admin listener checks the
// Host header and refuses cross-origin state changes before the console
// sees a request (pkg/admin). Every POST carries the session's CSRF token
// (csrf.go). No page holds a secret, except the answer that shows a new
// API key once. Every change lands in the audit log with the user's
// subject as actor.
package console

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/apikey"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/config"
)

// Prefix is the path the console is served under on the admin listener.
const Prefix = "/ui/"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// keyStore is what the keys page calls; *apikey.Store is one, the same
// store the admin API's /admin/keys uses.
type keyStore interface {
	Create(ctx context.Context, spec apikey.Key) (string, apikey.Key, error)
	Rotate(ctx context.Context, id string) (string, apikey.Key, error)
	Revoke(ctx context.Context, id string) (apikey.Key, error)
	List(ctx context.Context) ([]apikey.Key, error)
}

// recorder stores audit events; *audit.Recorder is one.
type recorder interface {
	Record(ctx context.Context, e audit.Event) error
}

// Options configure a Console. Config is required; every other field may
// be nil, and the page or feature it feeds then shows a designed
// "not configured" state.
type Options struct {
	// Config returns the running config, read on every request so a
	// reload applies at once (console.oidc, console.roles).
	Config func() *config.Config
	// Keys is the API key store of the keys page.
	Keys keyStore
	// Audit records the console's own events (sign-in, sign-out); key
	// changes are recorded by Keys with the user's subject as actor.
	Audit recorder
	// AuditLog lists audit events at or after since, oldest first, for
	// the audit page; the gateway passes audit.List on its JetStream.
	AuditLog func(ctx context.Context, since time.Time) ([]audit.Event, error)
	// Sessions is the NATS KV bucket sessions are kept in, so that every
	// gateway replica behind a load balancer knows them (EnsureSessions
	// makes it). Nil keeps them in this process's memory.
	Sessions sessionKV
	// HTTPClient calls the OpenID Provider (discovery, keys, token).
	// Default: a client with a 10s timeout.
	HTTPClient *http.Client
	// Pages feeds the read pages (pages.go).
	Pages PageOptions
	// Logger receives sign-ins, refusals and store errors. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// User is the signed-in user of a request.
type User struct {
	// Subject is the ID token's sub ("local-admin" for the one-time link).
	Subject string `json:"sub"`
	Name    string `json:"name,omitempty"`
	Email   string `json:"email,omitempty"`
	// Role is one of the pkg/access roles.
	Role string `json:"role"`
	// Dept is the user's department; department-bound roles see only it.
	Dept string `json:"dept,omitempty"`
}

type userKey struct{}

// UserFrom returns the signed-in user of a console request's ctx.
func UserFrom(ctx context.Context) (User, bool) {
	s, ok := ctx.Value(userKey{}).(*session)
	if !ok {
		return User{}, false
	}
	return s.User, true
}

// sessionFrom returns the session of a signed-in request.
func sessionFrom(ctx context.Context) *session {
	s, _ := ctx.Value(userKey{}).(*session)
	return s
}

// Console is the console's http.Handler.
type Console struct {
	o        Options
	log      *slog.Logger
	mux      *http.ServeMux
	tmpl     map[string]*template.Template
	static   http.Handler
	sessions *sessions
	links    *links
	oidc     *oidcClients
	nav      []navItem
}

// navItem is one entry of the navigation; it shows when the user's role
// may perform its action on some department.
type navItem struct {
	Label, Path, Action string
}

// New returns the console for o.
func New(o Options) (*Console, error) {
	if o.Config == nil {
		return nil, fmt.Errorf("console: Options.Config is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	tmpl, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	c := &Console{o: o, log: o.Logger, tmpl: tmpl, mux: http.NewServeMux(),
		static:   http.StripPrefix(Prefix+"static/", http.FileServerFS(static)),
		sessions: newSessions(o.Sessions, o.Now),
		links:    newLinks(o.Now),
		oidc:     newOIDCClients(o.HTTPClient),
		nav: []navItem{
			{"Overview", Prefix, access.SpendView},
			{"Budgets", Prefix + "budgets", access.BudgetsView},
			{"Keys", Prefix + "keys", access.KeysView},
			{"Requests", Prefix + "requests", access.RequestsView},
			{"Audit", Prefix + "audit", access.AuditView},
			{"Models", Prefix + "models", access.ModelsView},
		},
	}
	c.routes()
	return c, nil
}

// ServeHTTP sets the security headers of every answer and serves r.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header(), !strings.HasPrefix(r.URL.Path, Prefix+"static/"))
	c.mux.ServeHTTP(w, r)
}

// routes registers every route. The read pages register in pages.go.
func (c *Console) routes() {
	c.mux.Handle("GET "+Prefix+"static/", c.static)
	c.mux.HandleFunc("GET "+Prefix+"login", c.loginPage)
	c.mux.HandleFunc("GET "+Prefix+"login/oidc", c.oidcStart)
	c.mux.HandleFunc("GET "+Prefix+"callback", c.oidcCallback)
	c.mux.HandleFunc("GET "+Prefix+"login/link", c.linkSignIn)
	c.mux.HandleFunc("POST "+Prefix+"logout", c.logout)

	c.page("GET "+Prefix+"keys", access.KeysView, c.keysPage)
	c.page("POST "+Prefix+"keys", access.KeysManage, c.createKey)
	c.page("POST "+Prefix+"keys/{id}/rotate", access.KeysManage, c.rotateKey)
	c.page("POST "+Prefix+"keys/{id}/revoke", access.KeysManage, c.revokeKey)
	c.page("GET "+Prefix+"audit", access.AuditView, c.auditPage)

	c.readPages()

	c.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "There is no console page at "+r.URL.Path+".")
	})
}

// page registers h for pattern ("GET /ui/budgets", "POST /ui/keys"),
// reachable only by a signed-in user whose role may perform action on
// some department (access.Sees), and, for a POST, only with the
// session's CSRF token. h reads the user with UserFrom and checks the
// department of what it shows or changes with Allowed.
func (c *Console) page(pattern, action string, h http.HandlerFunc) {
	c.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s, err := c.sessions.get(r.Context(), r)
		if err != nil {
			c.log.Warn("console session store", "error", err)
			c.fail(w, r, http.StatusServiceUnavailable, "The session store cannot be read; try again shortly.")
			return
		}
		if s == nil {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
				return
			}
			c.fail(w, r, http.StatusUnauthorized, "Your session has ended: sign in again.")
			return
		}
		ctx := context.WithValue(r.Context(), userKey{}, s)
		r = r.WithContext(ctx)
		if !safeMethod(r.Method) && !checkCSRF(w, r, s) {
			c.log.Debug("console csrf refused", "path", r.URL.Path, "sub", s.User.Subject)
			c.fail(w, r, http.StatusForbidden, "This form has expired or did not come from the console (CSRF check): reload the page and try again.")
			return
		}
		if !access.Sees(s.User.Role, action, s.User.Dept) {
			c.forbid(w, r)
			return
		}
		h(w, r)
	})
}

// Allowed reports whether the user of r may perform action on department
// dept ("" for every department): the check a handler makes for what it
// shows or changes.
func (c *Console) Allowed(r *http.Request, action, dept string) bool {
	u, ok := UserFrom(r.Context())
	return ok && access.Allowed(u.Role, action, dept, u.Dept)
}

// safeMethod reports whether m changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// view is what the layout renders: the page's own data in Data.
type view struct {
	Title string
	User  *User
	Nav   []navLink
	CSRF  string
	Data  any
}

type navLink struct {
	Label, Path string
	Current     bool
}

// render answers status with page (templates/<page>.html in the layout),
// titled title, with data as .Data.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	t, ok := c.tmpl[page]
	if !ok {
		c.log.Error("console template missing", "page", page)
		http.Error(w, "page template missing", http.StatusInternalServerError)
		return
	}
	v := view{Title: title, Data: data}
	if s := sessionFrom(r.Context()); s != nil {
		u := s.User
		v.User, v.CSRF = &u, s.CSRF
		for _, n := range c.nav {
			if access.Sees(u.Role, n.Action, u.Dept) {
				v.Nav = append(v.Nav, navLink{Label: n.Label, Path: n.Path, Current: r.URL.Path == n.Path})
			}
		}
	}
	// Rendered whole before the status is sent, so a template error is a
	// 500, not half a page.
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout", v); err != nil {
		c.log.Error("console render", "page", page, "error", err)
		http.Error(w, "render page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// errorData is the data of the error page.
type errorData struct {
	Status  int
	Heading string
	Message string
}

// fail answers status with the designed error page saying msg.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", http.StatusText(status),
		errorData{Status: status, Heading: http.StatusText(status), Message: msg})
}

// forbid answers 403: the user's role may not do this.
func (c *Console) forbid(w http.ResponseWriter, r *http.Request) {
	u, _ := UserFrom(r.Context())
	c.log.Debug("console request refused", "path", r.URL.Path, "sub", u.Subject, "role", u.Role, "dept", u.Dept)
	c.render(w, r, http.StatusForbidden, "error", "Not allowed", errorData{Status: http.StatusForbidden,
		Heading: "Not allowed",
		Message: fmt.Sprintf("Your role (%s) is not allowed to see this page or make this change.", u.Role)})
}

// parseTemplates parses every page template with the layout: page
// "keys" is templates/layout.html with templates/keys.html.
func parseTemplates() (map[string]*template.Template, error) {
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(funcs()).ParseFS(templateFS, "templates/layout.html", f)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// funcs are the template functions: formatting here, and the read
// pages' own (pageFuncs in pages.go).
func funcs() template.FuncMap {
	m := template.FuncMap{
		"usd":  formatUSD,
		"when": formatTime,
		"datetime": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
	}
	for k, f := range pageFuncs() {
		m[k] = f
	}
	return m
}

// formatUSD writes nano-USD as dollars with up to 9 decimals, trailing
// zeros trimmed to cents: 1234500000 is "$1.2345".
func formatUSD(nano int64) string {
	sign := ""
	if nano < 0 {
		sign, nano = "-", -nano
	}
	frac := fmt.Sprintf("%09d", nano%1_000_000_000)
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s$%d.%s", sign, nano/1_000_000_000, frac)
}

// formatTime writes t in UTC to the minute; the zero time is "".
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}
