package auth

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/pkg/config"
)

// claims decodes a token payload: the registered claims jwt validates, and
// the principal read under the issuer's claim names. Claims are looked up
// by exact name (encoding/json would match struct fields case-insensitively).
type claims struct {
	jwt.RegisteredClaims
	names *config.ClaimNames
	p     Principal
}

// claimError reports a claim of the wrong type or with an invalid value. Its
// message names the claim only, so it is safe to show to a client.
type claimError struct{ name string }

func (e *claimError) Error() string { return "invalid claim " + e.name }

// UnmarshalJSON implements json.Unmarshaler.
func (c *claims) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	n := c.names
	p := &c.p
	errs := []error{
		decodeClaim(m, "iss", &c.Issuer),
		decodeClaim(m, "aud", &c.Audience),
		decodeClaim(m, "exp", &c.ExpiresAt),
		decodeClaim(m, "nbf", &c.NotBefore),
		decodeClaim(m, "iat", &c.IssuedAt),
		decodeClaim(m, n.Subject, &p.Subject),
		decodeClaim(m, n.KeyID, &p.KeyID),
		decodeClaim(m, n.Dept, &p.Dept),
		decodeClaim(m, n.Team, &p.Team),
		decodeClaim(m, n.Project, &p.Project),
		decodeModels(m, n.Models, &p.Models),
		decodeBudgets(m, n.Budgets, &p.Budgets),
		decodeLimit(m, n.RPM, &p.RPM),
		decodeLimit(m, n.TPM, &p.TPM),
	}
	if raw, ok := m[n.Admin]; ok {
		var admin any
		if json.Unmarshal(raw, &admin) == nil {
			p.Admin = admin == true
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func decodeClaim[T any](m map[string]json.RawMessage, name string, dst *T) error {
	raw, ok := m[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return &claimError{name}
	}
	return nil
}

// decodeModels reads a list of globs, or a single glob as a string. null is
// rejected: it would otherwise read as an absent claim, which allows every
// model.
func decodeModels(m map[string]json.RawMessage, name string, dst *[]string) error {
	raw, ok := m[name]
	if !ok {
		return nil
	}
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return &claimError{name}
		}
		*dst = []string{s}
		return nil
	}
	var models []string
	if err := json.Unmarshal(raw, &models); err != nil || models == nil {
		return &claimError{name}
	}
	*dst = models
	return nil
}

func decodeBudgets(m map[string]json.RawMessage, name string, dst *[]BudgetClaim) error {
	if err := decodeClaim(m, name, dst); err != nil {
		return err
	}
	if checkBudgets(*dst) != nil {
		return &claimError{name}
	}
	return nil
}

// decodeLimit reads a non-negative integer; an integral float (60.0) is
// accepted too.
func decodeLimit(m map[string]json.RawMessage, name string, dst *int64) error {
	if raw := m[name]; len(raw) > 0 && raw[0] == '"' {
		return &claimError{name}
	}
	var num json.Number
	if err := decodeClaim(m, name, &num); err != nil || num == "" {
		return err
	}
	if v, err := strconv.ParseInt(string(num), 10, 64); err == nil && v >= 0 {
		*dst = v
		return nil
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f >= math.MaxInt64 {
		return &claimError{name}
	}
	*dst = int64(f)
	return nil
}

// errIsClaim reports whether err comes from a claim that failed to decode,
// and returns it.
func errIsClaim(err error) (*claimError, bool) {
	var ce *claimError
	ok := errors.As(err, &ce)
	return ce, ok
}
