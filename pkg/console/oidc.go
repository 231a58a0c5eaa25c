package console

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/tollgate/tollgate/pkg/access"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

// LoginCookie holds the state of a sign-in in progress, binding the
// provider's answer to the browser that started it.
const LoginCookie = "tollgate_console_login"

// loginTTL bounds a sign-in at the provider.
const loginTTL = 10 * time.Minute

// login is a sign-in in progress, stored under the hash of its state.
type login struct {
	Nonce    string    `json:"nonce"`
	Verifier string    `json:"verifier"` // the PKCE code verifier
	Expires  time.Time `json:"expires"`
}

// oidcClients caches a provider's discovery per issuer URL: discovered
// once, on the first sign-in, and again after a failure.
type oidcClients struct {
	client *http.Client
	mu     sync.Mutex // guards m
	m      map[string]*oidc.Provider
}

func newOIDCClients(client *http.Client) *oidcClients {
	return &oidcClients{client: client, m: map[string]*oidc.Provider{}}
}

func (o *oidcClients) ctx(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, o.client)
}

func (o *oidcClients) provider(ctx context.Context, issuerURL string) (*oidc.Provider, error) {
	o.mu.Lock()
	p, ok := o.m[issuerURL]
	o.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := oidc.NewProvider(o.ctx(ctx), issuerURL)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	o.m[issuerURL] = p
	o.mu.Unlock()
	return p, nil
}

// oidcSetup is the console's client at the configured provider.
type oidcSetup struct {
	cfg      *config.Config
	issuer   config.Issuer
	provider *oidc.Provider
	oauth    oauth2.Config
}

// errNoOIDC: console.oidc.issuer is not set.
var errNoOIDC = errors.New("sign-in with an identity provider is not configured (console.oidc)")

// setup reads the running config and discovers the provider.
func (c *Console) setup(ctx context.Context) (*oidcSetup, error) {
	cfg := c.o.Config()
	oc := cfg.Console.OIDC
	if oc.Issuer == "" {
		return nil, errNoOIDC
	}
	is := cfg.Issuer(oc.Issuer)
	if is == nil {
		return nil, fmt.Errorf("console.oidc.issuer %q names no auth.issuers entry", oc.Issuer)
	}
	if err := config.CheckFetchURL(is.Issuer, is.AllowHTTP); err != nil {
		return nil, fmt.Errorf("issuer %s: %w", is.Name, err)
	}
	p, err := c.oidc.provider(ctx, is.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover issuer %s: %w", is.Name, err)
	}
	secret := ""
	if oc.ClientSecretFile != "" {
		b, err := os.ReadFile(oc.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("console.oidc.client_secret_file: %w", err)
		}
		secret = strings.TrimRight(string(b), "\r\n")
	}
	return &oidcSetup{cfg: cfg, issuer: *is, provider: p, oauth: oauth2.Config{
		ClientID: oc.ClientID, ClientSecret: secret, Endpoint: p.Endpoint(), RedirectURL: oc.RedirectURL,
		Scopes: append([]string{oidc.ScopeOpenID}, oc.Scopes...),
	}}, nil
}

// loginData is the data of the sign-in page.
type loginData struct {
	Issuer  string // the issuer's name; "" without OIDC
	Message string
}

// loginPage serves GET /ui/login.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", "Sign in", loginData{Issuer: c.o.Config().Console.OIDC.Issuer})
}

// oidcStart serves GET /ui/login/oidc: it sends the browser to the
// provider with a fresh state, nonce and PKCE challenge, remembered
// under the state and bound to the browser by LoginCookie.
func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	s, err := c.setup(r.Context())
	if err != nil {
		c.oidcFail(w, r, err)
		return
	}
	state, err1 := randomID()
	nonce, err2 := randomID()
	if err := errors.Join(err1, err2); err != nil {
		c.fail(w, r, http.StatusInternalServerError, "Could not start the sign-in.")
		return
	}
	verifier := oauth2.GenerateVerifier()
	exp := c.o.Now().Add(loginTTL)
	if err := c.sessions.put(r.Context(), storeKey("l.", state), login{Nonce: nonce, Verifier: verifier, Expires: exp}, exp); err != nil {
		c.log.Warn("console session store", "error", err)
		c.fail(w, r, http.StatusServiceUnavailable, "The session store cannot be written; try again shortly.")
		return
	}
	setCookie(w, LoginCookie, state, int(loginTTL/time.Second), c.secureCookies(r))
	http.Redirect(w, r, s.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

// oidcFail answers a provider that is not configured or not reachable.
func (c *Console) oidcFail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errNoOIDC) {
		c.fail(w, r, http.StatusNotFound, "Sign-in with an identity provider is not configured: set console.oidc (docs/console.md).")
		return
	}
	c.log.Warn("console oidc", "error", err)
	c.fail(w, r, http.StatusBadGateway, "The identity provider cannot be used right now: "+err.Error())
}

// oidcCallback serves GET /ui/callback: it checks the state against the
// browser's LoginCookie, exchanges the code with the PKCE verifier,
// verifies the ID token (signature, issuer, audience, expiry, nonce),
// maps its claims to a role and department and signs the user in.
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	setCookie(w, LoginCookie, "", -1, c.secureCookies(r))
	if e := q.Get("error"); e != "" {
		c.fail(w, r, http.StatusUnauthorized, "The identity provider refused the sign-in: "+e+" "+q.Get("error_description"))
		return
	}
	state := q.Get("state")
	ck, err := r.Cookie(LoginCookie)
	if state == "" || err != nil || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(state)) != 1 {
		c.fail(w, r, http.StatusBadRequest, "This sign-in was not started in this browser, or it was finished already: start again.")
		return
	}
	var l login
	found, err := c.sessions.load(r.Context(), storeKey("l.", state), &l, true)
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, "The session store cannot be read; try again shortly.")
		return
	}
	if !found || !c.o.Now().Before(l.Expires) {
		c.fail(w, r, http.StatusBadRequest, "This sign-in expired or was used already: start again.")
		return
	}
	s, err := c.setup(r.Context())
	if err != nil {
		c.oidcFail(w, r, err)
		return
	}
	ctx := c.oidc.ctx(r.Context())
	tok, err := s.oauth.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(l.Verifier))
	if err != nil {
		c.log.Warn("console oidc code exchange", "error", err)
		c.fail(w, r, http.StatusUnauthorized, "The identity provider did not accept the sign-in code: start again.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		c.fail(w, r, http.StatusBadGateway, "The identity provider sent no ID token.")
		return
	}
	idt, err := s.provider.VerifierContext(ctx, &oidc.Config{ClientID: s.oauth.ClientID, Now: c.o.Now}).Verify(ctx, raw)
	if err != nil {
		c.log.Warn("console id token refused", "error", err)
		c.fail(w, r, http.StatusUnauthorized, "The ID token could not be verified: "+err.Error())
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(l.Nonce)) != 1 {
		c.fail(w, r, http.StatusUnauthorized, "The ID token is not the answer to this sign-in (nonce mismatch): start again.")
		return
	}
	var payload json.RawMessage
	if err := idt.Claims(&payload); err != nil {
		c.fail(w, r, http.StatusBadGateway, "The ID token's claims cannot be read.")
		return
	}
	u, err := identify(s.cfg, s.issuer, payload)
	if err != nil {
		c.fail(w, r, http.StatusUnauthorized, "The ID token's claims cannot be used: "+err.Error())
		return
	}
	if u.Role == "" {
		c.log.Info("console sign-in refused: no role", "sub", u.Subject)
		c.render(w, r, http.StatusForbidden, "error", "No console role", errorData{Status: http.StatusForbidden,
			Heading: "Not allowed: no console role",
			Message: fmt.Sprintf("You signed in as %s, but no console role is given to you (console.roles). Ask an administrator for access.", u.Subject)})
		return
	}
	c.signIn(w, r, u, "oidc")
}

// identify maps verified ID token claims to a User: the subject and
// department as the issuer maps a bearer token's claims (or from
// console.dept_claim), the role from the first console.roles rule that
// matches, "" when none does.
func identify(cfg *config.Config, is config.Issuer, payload []byte) (User, error) {
	if cfg.Console.DeptClaim != "" {
		is.Claims.Dept = cfg.Console.DeptClaim
	}
	p, err := auth.Identity(is, payload)
	if err != nil {
		return User{}, err
	}
	if p.Subject == "" {
		return User{}, errors.New("no subject")
	}
	var named struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	}
	_ = json.Unmarshal(payload, &named)
	u := User{Subject: p.Subject, Name: named.Name, Email: named.Email, Dept: p.Dept}
	if u.Dept == auth.NoDept {
		u.Dept = ""
	}
	for _, rr := range cfg.Console.Roles {
		ok, err := auth.HasClaim(payload, rr.Claim, rr.Value)
		if err != nil {
			return User{}, err
		}
		if ok && access.Valid(rr.Role) {
			u.Role = rr.Role
			break
		}
	}
	return u, nil
}
