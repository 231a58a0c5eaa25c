// Package auth verifies the JWTs callers present and turns their claims into
// a Principal: who is calling, which models they may use and which limits
// the issuer signed into the token. Issuers, pinned algorithms and keys come
// from config.Auth; Mint signs tokens for development and tests.
package auth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"sync/atomic"
	"time"
)

// ErrNoToken means the request carried no bearer token.
var ErrNoToken = errors.New("no bearer token")

// ErrInvalidToken is wrapped by every error Verify returns for a token that
// is not accepted. The wrapping error's message adds a short reason that is
// safe to show to the client; it never contains key material.
var ErrInvalidToken = errors.New("invalid token")

// NoDept is the department of a token that names none, after its claim,
// the issuer's claim_mappings and claim_defaults: such a token is accounted
// under this value like any other department (usage events, spend totals,
// dept limits and rate-limit rules), so a dept "*" limit holds for it too
// instead of being escaped by leaving the claim out (issue 41, finding 8).
// A config limit on dept "unassigned" caps all of them together.
const NoDept = "unassigned"

// Principal is the verified identity of a caller, built from the claims of a
// verified token. It is shared (the verifier caches it) and must be treated
// as immutable once returned.
type Principal struct {
	// Issuer is the Name of the issuer config that verified the token.
	Issuer string
	// Subject is the sub claim.
	Subject string
	// KeyID is the jti claim: the id of this API key.
	KeyID   string
	Dept    string
	Team    string
	Project string
	// Models are the allowed model globs in path.Match syntax ("gpt-4o*",
	// "openai/*"). Nil means the claim is absent and every model is allowed;
	// an empty non-nil slice allows none.
	Models []string
	// Budgets are spend limits signed into the token; nil when absent.
	Budgets []BudgetClaim
	// RPM and TPM are per-minute request and token limits; 0 means not set.
	RPM, TPM int64
	// Admin is true when the admin claim is the JSON value true.
	Admin bool
	// Priority is the highest request priority the principal may use (the
	// priority claim, or an API key's priority); "" when absent. The
	// gateway checks it against config priority.levels.
	Priority string
	// ExpiresAt is the exp claim; NotBefore the nbf claim (zero when absent).
	ExpiresAt, NotBefore time.Time

	// derived is what the principal's user derives from its fields on every
	// request (Derived).
	derived atomic.Value
}

// Derived returns the value a caller stored with SetDerived, or nil. The
// verifier caches one Principal per token, so a value derived from the
// principal's fields alone (the gateway's budget scopes and token limits)
// is computed once per token instead of once per request. One caller
// stores one type of value.
func (p *Principal) Derived() any { return p.derived.Load() }

// SetDerived keeps v with the principal for Derived. v must be a function
// of the principal's fields and must not change afterwards.
func (p *Principal) SetDerived(v any) { p.derived.Store(v) }

// BudgetClaim is one spend limit signed into a token's budgets claim.
type BudgetClaim struct {
	// Scope is key, subject, team, dept or project.
	Scope string `json:"scope"`
	// Value is the scope value the limit applies to, or "*".
	Value string `json:"value"`
	// AmountUSD is the limit in US dollars.
	AmountUSD float64 `json:"amount_usd"`
	// Period is day or month (UTC calendar) or total.
	Period string `json:"period"`
}

// AllowsModel reports whether the principal may use model: always when
// Models is nil, otherwise when model equals or matches one of the globs. A
// malformed glob matches nothing. It does not allocate.
func (p *Principal) AllowsModel(model string) bool {
	if p.Models == nil {
		return true
	}
	for _, glob := range p.Models {
		if glob == model {
			return true
		}
		if ok, err := path.Match(glob, model); ok && err == nil {
			return true
		}
	}
	return false
}

// BearerToken returns the token of an Authorization header value of the form
// "Bearer <token>" (scheme case-insensitive, surrounding spaces ignored), or
// nil when the value is absent, uses another scheme or the token is empty or
// contains spaces or control characters. The result aliases authorization;
// it does not allocate.
func BearerToken(authorization []byte) []byte {
	v := trimSpace(authorization)
	const scheme = "bearer"
	if len(v) < len(scheme)+2 {
		return nil
	}
	for i := range len(scheme) {
		if v[i]|0x20 != scheme[i] {
			return nil
		}
	}
	if v[len(scheme)] != ' ' && v[len(scheme)] != '\t' {
		return nil
	}
	tok := trimSpace(v[len(scheme)+1:])
	if len(tok) == 0 {
		return nil
	}
	if !tokenChars(tok) {
		return nil
	}
	return tok
}

// tokenChars reports whether b has no space, control character or DEL. A
// token is some hundreds of bytes and read on every request: eight bytes at
// a time, a word is refused when it has a byte below 0x21 or a byte 0x7f
// (each test exact for the word as a whole).
func tokenChars(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; len(b) >= 8; b = b[8:] {
		x := binary.LittleEndian.Uint64(b)
		d := x ^ 0x7f*ones
		if (x-0x21*ones)&^x&highs|(d-ones)&^d&highs != 0 {
			return false
		}
	}
	for _, c := range b {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// checkBudgets rejects budget claims with an unknown scope or period or an
// amount that is negative or not a finite number.
func checkBudgets(budgets []BudgetClaim) error {
	for i, b := range budgets {
		switch b.Scope {
		case "key", "subject", "team", "dept", "project":
		default:
			return fmt.Errorf("budget %d: unknown scope %q", i, b.Scope)
		}
		switch b.Period {
		case "day", "month", "total":
		default:
			return fmt.Errorf("budget %d: unknown period %q", i, b.Period)
		}
		if !(b.AmountUSD >= 0 && b.AmountUSD <= maxAmountUSD) {
			return fmt.Errorf("budget %d: amount_usd out of range", i)
		}
	}
	return nil
}

// maxAmountUSD bounds a budget amount so it converts to int64 nano-USD
// without overflow.
const maxAmountUSD = 1e9
