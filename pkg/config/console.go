package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/access"
)

// Console configures the web console served under /ui/ on the admin
// listener (docs/console.md).
type Console struct {
	// Enabled serves the console. Default true. With the admin listener
	// off (admin.listen: off) there is no console either.
	Enabled *bool `yaml:"enabled"`
	// OIDC is the OpenID Provider users sign in with. Without it the only
	// way in is the one-time sign-in link the gateway prints at start on a
	// loopback admin listener.
	OIDC ConsoleOIDC `yaml:"oidc"`
	// Roles map ID token claims to console roles (admin, finance,
	// dept-admin, viewer); the first rule that matches wins. A user no
	// rule matches is refused. Default none.
	Roles []ConsoleRole `yaml:"roles"`
	// DeptClaim is the claim path (the syntax of auth.issuers[].claims) of
	// the user's department. Default: the department the issuer's
	// claims.dept, claim_mappings and claim_defaults give, as for a
	// bearer token.
	DeptClaim string `yaml:"dept_claim"`
	// SessionTTL is how long a console sign-in lasts. Default 8h.
	SessionTTL time.Duration `yaml:"session_ttl"`
}

// ConsoleOIDC is the console's OpenID Connect client registration.
type ConsoleOIDC struct {
	// Issuer names an auth.issuers entry (its name); its discovery_url,
	// or its issuer, locates the provider's discovery document, and its
	// claim names and mappings give the user's department. Empty: no
	// OIDC sign-in.
	Issuer string `yaml:"issuer"`
	// ClientID is the console's client id at the provider. Required with
	// issuer.
	ClientID string `yaml:"client_id"`
	// ClientSecretFile is a file holding the client secret; a trailing
	// newline is not part of it. Empty: a public client (PKCE only).
	ClientSecretFile string `yaml:"client_secret_file"`
	// RedirectURL is the console's callback as the browser reaches it,
	// ending in /ui/callback, registered at the provider. Required with
	// issuer. An https:// URL also marks the session cookie Secure.
	RedirectURL string `yaml:"redirect_url"`
	// Scopes asked for besides openid. Default [profile, email].
	Scopes []string `yaml:"scopes"`
}

// ConsoleRole is one rule of Console.Roles: a user whose ID token claim
// at path claim equals value (a string claim) or contains it (an array of
// strings) gets role.
type ConsoleRole struct {
	// Claim is a claim path, such as "groups" or "/realm_access/roles".
	Claim string `yaml:"claim"`
	// Value is the claim value the rule matches.
	Value string `yaml:"value"`
	// Role is admin, finance, dept-admin or viewer.
	Role string `yaml:"role"`
}

// DefaultConsoleSessionTTL is Console.SessionTTL's default.
const DefaultConsoleSessionTTL = 8 * time.Hour

// On reports whether the console is served (Enabled, default true).
func (c Console) On() bool { return c.Enabled == nil || *c.Enabled }

// console checks the console section against the issuers it names.
func (v *validator) console(c *Console, a *Auth) {
	if c.SessionTTL != 0 && c.SessionTTL < time.Minute {
		v.addf("console.session_ttl", "must be at least 1m (got %s)", c.SessionTTL)
	}
	if c.DeptClaim != "" {
		if _, err := ParseClaimPath(c.DeptClaim); err != nil {
			v.addf("console.dept_claim", "%v", err)
		}
	}
	for i, r := range c.Roles {
		p := fmt.Sprintf("console.roles[%d]", i)
		if _, err := ParseClaimPath(r.Claim); err != nil {
			v.addf(p+".claim", "%v", err)
		}
		if v.required(p+".role", r.Role) {
			v.oneOf(p+".role", "role", r.Role, access.Roles...)
		}
	}
	o := c.OIDC
	if o.Issuer == "" {
		if o.ClientID != "" || o.RedirectURL != "" || o.ClientSecretFile != "" {
			v.addf("console.oidc.issuer", "name the auth.issuers entry users sign in with")
		}
		return
	}
	var is *Issuer
	for i := range a.Issuers {
		if a.Issuers[i].Name == o.Issuer {
			is = &a.Issuers[i]
		}
	}
	switch {
	case is == nil:
		v.addf("console.oidc.issuer", "%q names no auth.issuers entry", o.Issuer)
	case is.DiscoveryURL == "":
		v.addf("console.oidc.issuer", "auth.issuers entry %q has no discovery_url: the console needs the provider's discovery document", o.Issuer)
	}
	v.required("console.oidc.client_id", o.ClientID)
	if v.required("console.oidc.redirect_url", o.RedirectURL) {
		u, err := url.Parse(o.RedirectURL)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
			v.addf("console.oidc.redirect_url", "want an absolute http(s) URL, such as https://gateway.example/ui/callback")
		case !strings.HasSuffix(u.Path, "/ui/callback"):
			v.addf("console.oidc.redirect_url", "must end in /ui/callback, the console's callback (got path %q)", u.Path)
		}
	}
}
