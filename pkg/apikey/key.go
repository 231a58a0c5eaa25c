package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
)

// Prefix starts every API key. A bearer value with it is an API key; any
// other value is a JWT.
const Prefix = "tg-"

// Issuer is the Principal.Issuer of a caller that presented an API key.
const Issuer = "apikey"

const (
	idBytes     = 8           // random bytes of a key id
	idLen       = 2 * idBytes // hex digits of a key id
	secretBytes = 32          // 256 random bits
	secretLen   = 43          // base64url, unpadded, of secretBytes
	tokenLen    = len(Prefix) + idLen + 1 + secretLen
)

// Errors of Verify and of the Store. The gateway answers ErrRevoked as
// key_revoked and the others as invalid_api_key.
var (
	ErrMalformed = errors.New("invalid api key: malformed")
	ErrUnknown   = errors.New("invalid api key: unknown key")
	ErrRevoked   = errors.New("invalid api key: the key has been revoked")
	ErrExpired   = errors.New("invalid api key: the key has expired")
	ErrNotFound  = errors.New("api key not found")
	// ErrInvalid is wrapped by Create's refusal of a spec (no subject, a
	// bad budget).
	ErrInvalid = errors.New("invalid api key spec")
)

// HasPrefix reports whether token is meant as an API key.
func HasPrefix(token []byte) bool {
	return len(token) >= len(Prefix) && string(token[:len(Prefix)]) == Prefix
}

// Key is an API key as stored and listed: the principal it stands for and
// its history. It never holds the secret or its hash.
type Key struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Subject string `json:"sub"`
	Dept    string `json:"dept"`
	Team    string `json:"team,omitempty"`
	Project string `json:"project,omitempty"`
	// Models are the allowed model globs; null allows every model, as an
	// absent claim does in a JWT.
	Models  []string           `json:"models"`
	Budgets []auth.BudgetClaim `json:"budgets,omitempty"`
	// RPM and TPM are per-minute limits on this key id; 0 means none.
	RPM int64 `json:"rpm,omitempty"`
	TPM int64 `json:"tpm,omitempty"`
	// Priority is the highest request priority of the key, as a token's
	// priority claim (auth.Principal.Priority); empty takes the gateway's
	// priority.default.
	Priority string `json:"priority,omitempty"`
	// ExpiresAt is when the key stops working; zero means never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	RotatedAt time.Time `json:"rotated_at,omitzero"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// RevokedAtUnixNano is RevokedAt to the nanosecond, to measure how
	// long the revocation took to reach each gateway.
	RevokedAtUnixNano int64 `json:"revoked_at_unix_nano,omitempty"`
}

// Principal is the identity the key stands for. API keys are never admins.
func (k *Key) Principal() *auth.Principal {
	return &auth.Principal{Issuer: Issuer, Subject: k.Subject, KeyID: k.ID, Dept: k.Dept, Team: k.Team,
		Project: k.Project, Models: k.Models, Budgets: k.Budgets, RPM: k.RPM, TPM: k.TPM, Priority: k.Priority, ExpiresAt: k.ExpiresAt}
}

// check rejects a key without a subject or department, or with a limit
// or budget a JWT could not carry.
func (k *Key) check() error {
	switch {
	case k.Subject == "":
		return fmt.Errorf("%w: sub is required", ErrInvalid)
	case k.Dept == "":
		return fmt.Errorf("%w: dept is required", ErrInvalid)
	case k.RPM < 0 || k.TPM < 0:
		return fmt.Errorf("%w: rpm and tpm must not be negative", ErrInvalid)
	}
	for i, b := range k.Budgets {
		switch b.Scope {
		case "key", "subject", "team", "dept", "project":
		default:
			return fmt.Errorf("%w: budget %d: unknown scope %q", ErrInvalid, i, b.Scope)
		}
		switch b.Period {
		case "day", "month", "total":
		default:
			return fmt.Errorf("%w: budget %d: unknown period %q", ErrInvalid, i, b.Period)
		}
		if !(b.AmountUSD >= 0 && b.AmountUSD <= 1e9) {
			return fmt.Errorf("%w: budget %d: amount_usd out of range", ErrInvalid, i)
		}
	}
	// The gateway reads the budgets as a token's claim: refuse here what
	// it would refuse on every request (a team value "research/*").
	if _, err := budget.FromClaims(k.Budgets); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// record is a Key as stored in the bucket, with the hash of its secret.
type record struct {
	Key
	// Hash is the hex SHA-256 of the secret part of the token.
	Hash string `json:"hash"`
}

// newID returns a random key id.
func newID() (string, error) {
	var b [idBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate key id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// newToken returns a token for id and the hex hash of its secret.
func newToken(id string) (token, hash string, err error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("generate key secret: %w", err)
	}
	secret := base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(secret))
	return Prefix + id + "_" + secret, hex.EncodeToString(sum[:]), nil
}

// split returns the id and secret of a well-formed token without
// allocating: the id as a fixed-size array, to look up without a string.
func split(token []byte) (id [idLen]byte, secret []byte, ok bool) {
	if len(token) != tokenLen || !HasPrefix(token) || token[len(Prefix)+idLen] != '_' {
		return id, nil, false
	}
	for i, c := range token[len(Prefix) : len(Prefix)+idLen] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return id, nil, false
		}
		id[i] = c
	}
	secret = token[len(Prefix)+idLen+1:]
	for _, c := range secret {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return id, nil, false
		}
	}
	return id, secret, true
}

// ValidID reports whether id is spelled as a key id.
func ValidID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
