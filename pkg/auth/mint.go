package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/pkg/config"
)

// DefaultMintTTL is the lifetime Mint gives a token when MintOptions.TTL is
// not positive.
const DefaultMintTTL = time.Hour

// MintOptions describe a token for Mint. Empty string fields and zero
// numbers leave their claim out.
type MintOptions struct {
	// Issuer is the iss claim; required.
	Issuer string
	// Audience is the aud claim, left out when empty.
	Audience string
	Subject  string
	// KeyID is the jti claim; a random one is generated when empty.
	KeyID   string
	Dept    string
	Team    string
	Project string
	// Models are the allowed model globs; nil leaves the claim out (all
	// models allowed), an empty non-nil slice allows none.
	Models []string
	// TTL is the token lifetime from now; DefaultMintTTL when not positive.
	TTL   time.Duration
	Admin bool
	// RPM and TPM are written when positive.
	RPM, TPM int64
	// Priority is written when not empty (see auth.Principal.Priority).
	Priority string
	Budgets  []BudgetClaim
	// Alg is HS256 (default), HS384, HS512, RS256, ES256 or EdDSA.
	Alg string
	// KID is written to the header's kid when set.
	KID string
	// Key signs the token: a []byte (or string) HMAC secret of at least 32
	// bytes for HS*, a *rsa.PrivateKey for RS256, a P-256 *ecdsa.PrivateKey
	// for ES256, an ed25519.PrivateKey (any crypto.Signer with an Ed25519
	// public key) for EdDSA.
	Key any
	// Claims names the claims to write; empty fields take the defaults of
	// config.ClaimNames.
	Claims config.ClaimNames
}

// Mint signs a token for a development or test issuer, as used by
// `tollctl token` and the gateway's first-run banner. It sets iss, sub, jti
// (random when empty), iat and nbf (now) and exp (now + TTL), plus the
// principal claims under the names in o.Claims.
func Mint(o MintOptions, now time.Time) (string, error) {
	name := o.Alg
	if name == "" {
		name = "HS256"
	}
	a, ok := parseAlg(name)
	if !ok {
		return "", fmt.Errorf("mint token: unsupported algorithm %q", name)
	}
	if o.Issuer == "" {
		return "", errors.New("mint token: issuer is required")
	}
	key, err := signingKey(a, o.Key)
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	if err := checkBudgets(o.Budgets); err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	claims, err := mintClaims(o, now)
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	tok := jwt.NewWithClaims(a.method(), claims)
	if o.KID != "" {
		tok.Header["kid"] = o.KID
	}
	s, err := tok.SignedString(key)
	if err != nil {
		return "", fmt.Errorf("mint token: sign %s: %w", a, err)
	}
	return s, nil
}

func mintClaims(o MintOptions, now time.Time) (jwt.MapClaims, error) {
	ttl := o.TTL
	if ttl <= 0 {
		ttl = DefaultMintTTL
	}
	jti := o.KeyID
	if jti == "" {
		jti = rand.Text()
	}
	names := o.Claims.WithDefaults()
	c := jwt.MapClaims{
		"iss": o.Issuer,
		"iat": now.Unix(),
		"nbf": now.Unix(),
		"exp": now.Add(ttl).Unix(),
	}
	put := func(name string, v any) error {
		if _, dup := c[name]; dup {
			return fmt.Errorf("claim %q is used twice", name)
		}
		c[name] = v
		return nil
	}
	var errs []error
	if o.Audience != "" {
		errs = append(errs, put("aud", o.Audience))
	}
	errs = append(errs, put(names.KeyID, jti))
	strs := []struct{ name, v string }{
		{names.Subject, o.Subject}, {names.Dept, o.Dept}, {names.Team, o.Team}, {names.Project, o.Project},
		{names.Priority, o.Priority},
	}
	for _, s := range strs {
		if s.v != "" {
			errs = append(errs, put(s.name, s.v))
		}
	}
	if o.Models != nil {
		errs = append(errs, put(names.Models, o.Models))
	}
	if len(o.Budgets) > 0 {
		errs = append(errs, put(names.Budgets, o.Budgets))
	}
	if o.RPM > 0 {
		errs = append(errs, put(names.RPM, o.RPM))
	}
	if o.TPM > 0 {
		errs = append(errs, put(names.TPM, o.TPM))
	}
	if o.Admin {
		errs = append(errs, put(names.Admin, true))
	}
	return c, errors.Join(errs...)
}

// signingKey checks that key fits algorithm a and returns it in the form
// the jwt signing method expects.
func signingKey(a alg, key any) (any, error) {
	if s, ok := key.(string); ok {
		key = []byte(s)
	}
	var pub any
	switch k := key.(type) {
	case nil:
		return nil, fmt.Errorf("no key for %s", a)
	case []byte:
		pub = k
	case *rsa.PrivateKey:
		pub = &k.PublicKey
	case *ecdsa.PrivateKey:
		pub = &k.PublicKey
	case crypto.Signer:
		pub = k.Public()
	default:
		return nil, fmt.Errorf("unsupported signing key type %T", key)
	}
	algs, err := keyAlgs(pub)
	if err != nil {
		return nil, err
	}
	if !algs.has(a) {
		return nil, fmt.Errorf("signing key type %T does not fit %s", key, a)
	}
	return key, nil
}
