package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
	"github.com/maypok86/otter/v2"
	"github.com/tidwall/gjson"

	"github.com/tollgate/tollgate/pkg/config"
)

// DefaultCacheSize is the number of verified tokens cached when
// config.Auth.CacheSize is 0.
const DefaultCacheSize = 65536

// DefaultLeeway is the clock skew tolerated on exp, nbf and iat when an
// issuer sets no leeway.
const DefaultLeeway = 30 * time.Second

// maxTokenLen bounds the size of a token Verify decodes, in bytes.
const maxTokenLen = 16 << 10

// tokenError is what Verify returns for a refused token. Its message is a
// short reason safe to show a client; it unwraps to ErrInvalidToken and, when
// there is one, to the jwt error behind the reason (jwt.ErrTokenExpired, ...).
type tokenError struct {
	reason string
	cause  error
}

func (e *tokenError) Error() string { return "invalid token: " + e.reason }

func (e *tokenError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrInvalidToken}
	}
	return []error{ErrInvalidToken, e.cause}
}

// Reasons a token is refused. They are shared values: Verify returns them
// without allocating.
var (
	errMalformed     = &tokenError{reason: "token is malformed", cause: jwt.ErrTokenMalformed}
	errTooLong       = &tokenError{reason: "token is too long", cause: jwt.ErrTokenMalformed}
	errUnknownIssuer = &tokenError{reason: "unknown issuer"}
	errAlgNotAllowed = &tokenError{reason: "algorithm not allowed"}
	errUnknownKID    = &tokenError{reason: "unknown kid"}
	errKeyMismatch   = &tokenError{reason: "key does not match algorithm"}
	errNoKey         = &tokenError{reason: "no key for algorithm"}
	errNoKeys        = &tokenError{reason: "issuer keys are not available yet"}
	errBadSignature  = &tokenError{reason: "signature is invalid", cause: jwt.ErrTokenSignatureInvalid}
	errExpired       = &tokenError{reason: "token is expired", cause: jwt.ErrTokenExpired}
	errNotValidYet   = &tokenError{reason: "token is not valid yet", cause: jwt.ErrTokenNotValidYet}
	errIssuedLater   = &tokenError{reason: "token used before issued", cause: jwt.ErrTokenUsedBeforeIssued}
	errNoExpiry      = &tokenError{reason: "token has no exp", cause: jwt.ErrTokenRequiredClaimMissing}
	errNoAudience    = &tokenError{reason: "token has no audience", cause: jwt.ErrTokenRequiredClaimMissing}
	errClaimMissing  = &tokenError{reason: "required claim is missing", cause: jwt.ErrTokenRequiredClaimMissing}
	errBadAudience   = &tokenError{reason: "invalid audience", cause: jwt.ErrTokenInvalidAudience}
	errBadIssuer     = &tokenError{reason: "invalid issuer", cause: jwt.ErrTokenInvalidIssuer}
	errUnverifiable  = &tokenError{reason: "token is unverifiable", cause: jwt.ErrTokenUnverifiable}
)

// Verifier checks tokens against the configured issuers and caches the
// principals of verified tokens. It is safe for concurrent use; its
// configuration is fixed at construction.
type Verifier struct {
	// issuers are keyed by the iss claim they accept.
	issuers map[string]*issuer
	// cache holds verified tokens by their text; nil when disabled.
	cache *otter.Cache[string, cached]
	clock func() time.Time
}

// cached is a verified token's principal and the window, leeway included,
// in which the token is valid: from <= now < until.
type cached struct {
	p           *Principal
	from, until time.Time
}

// NewVerifier builds a Verifier from cfg, reading every key file once. It
// returns an error naming the issuer (and key) for an unknown algorithm, a
// key that fits none of its issuer's algorithms, a pinned algorithm without
// a key, a duplicate kid or an unreadable file. clock is the time source for
// the exp, nbf and iat checks; nil means time.Now. An Auth without issuers
// is valid and refuses every token.
func NewVerifier(cfg config.Auth, clock func() time.Time) (*Verifier, error) {
	if clock == nil {
		clock = time.Now
	}
	v := &Verifier{issuers: make(map[string]*issuer, len(cfg.Issuers)), clock: clock}
	names := make(map[string]bool, len(cfg.Issuers))
	for i, ic := range cfg.Issuers {
		label := fmt.Sprintf("#%d", i)
		if ic.Name != "" {
			label = fmt.Sprintf("%q", ic.Name)
		}
		switch {
		case ic.Name == "":
			return nil, fmt.Errorf("auth issuer %s: name is required", label)
		case names[ic.Name]:
			return nil, fmt.Errorf("auth issuer %s: name is used twice", label)
		case ic.Issuer == "":
			return nil, fmt.Errorf("auth issuer %s: issuer (the expected iss claim) is required", label)
		case v.issuers[ic.Issuer] != nil:
			return nil, fmt.Errorf("auth issuer %s: issuer %q is also used by %q", label, ic.Issuer, v.issuers[ic.Issuer].name)
		}
		is, err := newIssuer(ic, clock)
		if err != nil {
			return nil, fmt.Errorf("auth issuer %s: %w", label, err)
		}
		names[ic.Name] = true
		v.issuers[ic.Issuer] = is
	}
	size := cfg.CacheSize
	switch {
	case size == -1:
		return v, nil
	case size < -1:
		return nil, fmt.Errorf("auth cache_size %d: want -1 (off), 0 (default) or a positive size", size)
	case size == 0:
		size = DefaultCacheSize
	}
	c, err := otter.New(&otter.Options[string, cached]{MaximumSize: size})
	if err != nil {
		return nil, fmt.Errorf("auth token cache: %w", err)
	}
	v.cache = c
	return v, nil
}

// Verify checks token, a raw JWT without the "Bearer " prefix, and returns
// its principal. An empty token gives ErrNoToken; a refused one an error
// wrapping ErrInvalidToken whose message is a reason safe to show a client.
// A token verified before is served from the cache without a signature
// check and without allocating; its exp and nbf are still checked against
// the clock. The principal is shared and must not be modified.
func (v *Verifier) Verify(token []byte) (*Principal, error) {
	if len(token) == 0 {
		return nil, ErrNoToken
	}
	if v.cache != nil {
		// The key only lives for the lookup, so it may alias token.
		if c, ok := v.cache.GetIfPresent(unsafe.String(unsafe.SliceData(token), len(token))); ok {
			now := v.clock()
			if !now.Before(c.until) {
				return nil, errExpired
			}
			if now.Before(c.from) {
				return nil, errNotValidYet
			}
			return c.p, nil
		}
	}
	if len(token) > maxTokenLen {
		return nil, errTooLong
	}
	s := string(token)
	is, err := v.issuerOf(s)
	if err != nil {
		return nil, err
	}
	p, from, err := is.verify(s)
	if err != nil {
		return nil, err
	}
	if v.cache != nil {
		v.cache.Set(s, cached{p: p, from: from, until: p.ExpiresAt.Add(is.leeway)})
	}
	return p, nil
}

// issuerOf picks the issuer by the iss claim of the unverified token; the
// parser then checks iss again, exactly, on the verified payload.
func (v *Verifier) issuerOf(token string) (*issuer, error) {
	_, rest, ok := strings.Cut(token, ".")
	if !ok {
		return nil, errMalformed
	}
	payload, _, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, errMalformed
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || !gjson.ValidBytes(b) {
		return nil, errMalformed
	}
	iss := gjson.GetBytes(b, "iss")
	if iss.Type != gjson.String {
		return nil, errUnknownIssuer
	}
	is, ok := v.issuers[iss.Str]
	if !ok {
		return nil, errUnknownIssuer
	}
	return is, nil
}

// issuer is one configured issuer, ready to verify.
type issuer struct {
	name   string
	pinned algSet
	leeway time.Duration
	paths  *claimPaths
	parser *jwt.Parser
	// keyfunc is the key method value, built once so that Verify does not
	// allocate it per call.
	keyfunc jwt.Keyfunc
	// keys is the current key set; a fetch swaps it whole, so Verify never
	// takes a lock. It is never nil; an empty set refuses every token.
	keys atomic.Pointer[keySet]
	// remote fetches the keys of an issuer with discovery_url or jwks_url;
	// nil for an issuer with configured keys only.
	remote *remote
}

// keySet is an issuer's keys, indexed for verification. It is immutable.
type keySet struct {
	// byKID holds the keys that have a kid.
	byKID map[string]verKey
	// noKID is, per algorithm, what a token without kid is checked against:
	// nil, a key or a jwt.VerificationKeySet.
	noKID [numAlgs]any
	// n is the number of keys.
	n int
}

func newIssuer(c config.Issuer, clock func() time.Time) (*issuer, error) {
	if len(c.Algorithms) == 0 {
		return nil, errors.New("algorithms are required")
	}
	is := &issuer{name: c.Name, leeway: c.Leeway}
	var methods []string
	for _, name := range c.Algorithms {
		a, ok := parseAlg(name)
		if !ok {
			return nil, fmt.Errorf("algorithm %q is not supported (want HS256, HS384, HS512, RS256, ES256 or EdDSA)", name)
		}
		if !is.pinned.has(a) {
			methods = append(methods, a.String())
		}
		is.pinned |= 1 << a
	}
	switch {
	case is.leeway < 0:
		return nil, fmt.Errorf("leeway %s is negative", is.leeway)
	case is.leeway == 0:
		is.leeway = DefaultLeeway
	}
	names := c.Claims.WithDefaults()
	if err := checkClaimNames(names); err != nil {
		return nil, err
	}
	paths, err := compileClaims(names, c.ClaimMappings, c.ClaimDefaults)
	if err != nil {
		return nil, err
	}
	is.paths = paths
	remote := c.DiscoveryURL != "" || c.JWKSURL != ""
	static, fallback, err := loadKeys(c, is.pinned, remote)
	if err != nil {
		return nil, err
	}
	ks, err := indexKeys(append(static, fallback...))
	if err != nil {
		return nil, err
	}
	is.keys.Store(ks)
	if remote {
		if is.remote, err = newRemote(c, is.pinned, static, clock); err != nil {
			return nil, err
		}
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithIssuer(c.Issuer),
		jwt.WithLeeway(is.leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(clock),
		jwt.WithStrictDecoding(),
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	is.parser = jwt.NewParser(opts...)
	is.keyfunc = is.key
	return is, nil
}

// checkClaimNames rejects a principal claim renamed onto a registered claim
// that jwt validates itself, and two principal fields read from one claim.
func checkClaimNames(n config.ClaimNames) error {
	seen := make(map[string]bool, 10)
	for _, name := range []string{n.Subject, n.KeyID, n.Dept, n.Team, n.Project, n.Models, n.Budgets, n.RPM, n.TPM, n.Admin, n.Priority} {
		switch name {
		case "iss", "aud", "exp", "nbf", "iat":
			return fmt.Errorf("claims: %q is a registered claim and cannot name a principal field", name)
		}
		if seen[name] {
			return fmt.Errorf("claims: %q names two principal fields", name)
		}
		seen[name] = true
	}
	return nil
}

// loadKeys reads the issuer's inline keys (static) and its JWKS file
// (fallback) and, unless the issuer fetches its keys (remote), checks that
// every pinned algorithm has one. A fetch replaces the fallback keys and
// keeps the static ones.
func loadKeys(c config.Issuer, pinned algSet, remote bool) (static, fallback []verKey, err error) {
	for i, kc := range c.Keys {
		k, err := loadKey(i, kc, pinned)
		if err != nil {
			return nil, nil, err
		}
		static = append(static, k)
	}
	if c.JWKSFile != "" {
		if fallback, err = loadJWKS(c.JWKSFile, pinned); err != nil {
			return nil, nil, err
		}
	}
	if remote {
		return static, fallback, nil
	}
	keys := append(static[:len(static):len(static)], fallback...)
	if len(keys) == 0 {
		return nil, nil, errors.New("no keys: set keys, jwks_file, jwks_url or discovery_url")
	}
	var covered algSet
	for _, k := range keys {
		covered |= k.algs
	}
	for a := range numAlgs {
		if pinned.has(a) && !covered.has(a) {
			return nil, nil, fmt.Errorf("algorithm %s has no key", a)
		}
	}
	return static, fallback, nil
}

// indexKeys files keys by kid and precomputes, per algorithm, what a token
// without kid is checked against: the keys without kid, or every key when
// all of them have one.
func indexKeys(keys []verKey) (*keySet, error) {
	ks := &keySet{byKID: make(map[string]verKey, len(keys)), n: len(keys)}
	var plain []verKey
	for _, k := range keys {
		if k.kid == "" {
			plain = append(plain, k)
			continue
		}
		if prev, dup := ks.byKID[k.kid]; dup {
			return nil, fmt.Errorf("%s: kid %q is also used by %s", k.name, k.kid, prev.name)
		}
		ks.byKID[k.kid] = k
	}
	if len(plain) == 0 {
		plain = keys
	}
	for a := range numAlgs {
		var set []jwt.VerificationKey
		for _, k := range plain {
			if k.algs.has(a) {
				set = append(set, k.key)
			}
		}
		switch len(set) {
		case 0:
		case 1:
			ks.noKID[a] = set[0]
		default:
			ks.noKID[a] = jwt.VerificationKeySet{Keys: set}
		}
	}
	return ks, nil
}

// key is the issuer's jwt.Keyfunc. It hands out only a key whose type fits
// the token's alg, so a public key can never serve as an HMAC secret. A key
// with a kid verifies only tokens naming that kid. An unknown kid asks a
// remote issuer to refetch its keys, without waiting for it.
func (is *issuer) key(t *jwt.Token) (any, error) {
	a, ok := parseAlg(t.Method.Alg())
	if !ok || !is.pinned.has(a) {
		return nil, errAlgNotAllowed
	}
	ks := is.keys.Load()
	if ks.n == 0 {
		return nil, errNoKeys
	}
	if raw, present := t.Header["kid"]; present && raw != "" {
		kid, ok := raw.(string)
		if !ok {
			return nil, errUnknownKID
		}
		k, ok := ks.byKID[kid]
		if !ok {
			if is.remote != nil {
				is.remote.kick()
			}
			return nil, errUnknownKID
		}
		if !k.algs.has(a) {
			return nil, errKeyMismatch
		}
		return k.key, nil
	}
	if k := ks.noKID[a]; k != nil {
		return k, nil
	}
	return nil, errNoKey
}

// verify checks the token's signature and claims and returns its principal
// and the start of its validity window (nbf or iat, less the leeway).
func (is *issuer) verify(token string) (*Principal, time.Time, error) {
	c := &claims{paths: is.paths}
	tok, err := is.parser.ParseWithClaims(token, c, is.keyfunc)
	if err != nil {
		return nil, time.Time{}, is.reason(tok, c, err)
	}
	p := &c.p
	p.Issuer = is.name
	p.ExpiresAt = c.ExpiresAt.Time
	var from time.Time
	if c.NotBefore != nil {
		p.NotBefore = c.NotBefore.Time
		from = p.NotBefore
	}
	if c.IssuedAt != nil && c.IssuedAt.After(from) {
		from = c.IssuedAt.Time
	}
	if !from.IsZero() {
		from = from.Add(-is.leeway)
	}
	return p, from, nil
}

// reason turns a jwt error into one of the client-safe reasons.
func (is *issuer) reason(tok *jwt.Token, c *claims, err error) error {
	var own *tokenError
	if errors.As(err, &own) {
		return own // returned by the keyfunc
	}
	if ce, ok := errIsClaim(err); ok {
		return &tokenError{reason: ce.Error(), cause: jwt.ErrTokenMalformed}
	}
	if errors.Is(err, jwt.ErrTokenMalformed) {
		return errMalformed
	}
	// WithValidMethods reports a forbidden alg as a bad signature, an alg
	// jwt does not know (or none at all) as unverifiable.
	if tok == nil || tok.Method == nil {
		return errAlgNotAllowed
	}
	if a, ok := parseAlg(tok.Method.Alg()); !ok || !is.pinned.has(a) {
		return errAlgNotAllowed
	}
	switch {
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return errBadSignature
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		switch {
		case c.ExpiresAt == nil:
			return errNoExpiry
		case len(c.Audience) == 0:
			return errNoAudience
		}
		return errClaimMissing
	case errors.Is(err, jwt.ErrTokenExpired):
		return errExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return errNotValidYet
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return errIssuedLater
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return errBadAudience
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return errBadIssuer
	}
	return errUnverifiable
}
