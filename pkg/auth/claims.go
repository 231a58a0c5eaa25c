package auth

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/golang-jwt/jwt/v5"
)

// claims decodes a token payload: the registered claims jwt validates, and
// the principal read at the issuer's claim paths. Claims are looked up by
// exact name (encoding/json would match struct fields case-insensitively).
type claims struct {
	jwt.RegisteredClaims
	paths *claimPaths
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
	n := c.paths
	p := &c.p
	errs := []error{
		decodeClaim(m, claimIss, &c.Issuer),
		decodeClaim(m, claimAud, &c.Audience),
		decodeClaim(m, claimExp, &c.ExpiresAt),
		decodeClaim(m, claimNbf, &c.NotBefore),
		decodeClaim(m, claimIat, &c.IssuedAt),
		decodeClaim(m, n.sub, &p.Subject),
		decodeClaim(m, n.kid, &p.KeyID),
		decodeClaim(m, n.dept, &p.Dept),
		decodeClaim(m, n.team, &p.Team),
		decodeClaim(m, n.project, &p.Project),
		decodeModels(m, n.models, &p.Models),
		decodeBudgets(m, n.budgets, &p.Budgets),
		decodeLimit(m, n.rpm, &p.RPM),
		decodeLimit(m, n.tpm, &p.TPM),
		decodeClaim(m, n.priority, &p.Priority),
	}
	if raw, ok := n.admin.get(m); ok {
		var admin any
		if json.Unmarshal(raw, &admin) == nil {
			p.Admin = admin == true
		}
	}
	n.mapFields(m, p)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Paths of the registered claims jwt validates.
var (
	claimIss = claimPath{text: "iss", segs: []string{"iss"}}
	claimAud = claimPath{text: "aud", segs: []string{"aud"}}
	claimExp = claimPath{text: "exp", segs: []string{"exp"}}
	claimNbf = claimPath{text: "nbf", segs: []string{"nbf"}}
	claimIat = claimPath{text: "iat", segs: []string{"iat"}}
)

func decodeClaim[T any](m map[string]json.RawMessage, path claimPath, dst *T) error {
	raw, ok := path.get(m)
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return &claimError{path.text}
	}
	return nil
}

// decodeModels reads a list of globs, or a single glob as a string. null is
// rejected: it would otherwise read as an absent claim, which allows every
// model.
func decodeModels(m map[string]json.RawMessage, path claimPath, dst *[]string) error {
	name := path.text
	raw, ok := path.get(m)
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

func decodeBudgets(m map[string]json.RawMessage, path claimPath, dst *[]BudgetClaim) error {
	if err := decodeClaim(m, path, dst); err != nil {
		return err
	}
	if checkBudgets(*dst) != nil {
		return &claimError{path.text}
	}
	return nil
}

// decodeLimit reads a non-negative integer; an integral float (60.0) is
// accepted too.
func decodeLimit(m map[string]json.RawMessage, path claimPath, dst *int64) error {
	name := path.text
	if raw, _ := path.get(m); len(raw) > 0 && raw[0] == '"' {
		return &claimError{name}
	}
	var num json.Number
	if err := decodeClaim(m, path, &num); err != nil || num == "" {
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
