package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/pkg/config"
)

func TestMintClaims(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	secret := []byte(strings.Repeat("s", 32))
	tok, err := Mint(MintOptions{
		Issuer: "https://issuer.test", Audience: "tollgate", Subject: "alice", KeyID: "k1",
		Dept: "eng", Team: "infra", Project: "p", Models: []string{"gpt-4o*"}, TTL: time.Minute,
		Admin: true, RPM: 60, TPM: 1000, KID: "v1", Key: secret,
		Budgets: []BudgetClaim{{Scope: "team", Value: "infra", AmountUSD: 12.5, Period: "month"}},
		Claims:  config.ClaimNames{Dept: "department"},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{}
	p := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithTimeFunc(func() time.Time { return now }))
	parsed, err := p.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return secret, nil })
	if err != nil {
		t.Fatal(err)
	}
	if kid := parsed.Header["kid"]; kid != "v1" {
		t.Errorf("kid = %v", kid)
	}
	want := map[string]any{
		"iss": "https://issuer.test", "aud": "tollgate", "sub": "alice", "jti": "k1",
		"department": "eng", "team": "infra", "project": "p", "rpm": 60.0, "tpm": 1000.0,
		"admin": true, "iat": float64(now.Unix()), "nbf": float64(now.Unix()),
		"exp": float64(now.Add(time.Minute).Unix()),
	}
	for k, v := range want {
		if claims[k] != v {
			t.Errorf("claim %s = %v, want %v", k, claims[k], v)
		}
	}
	if _, ok := claims["dept"]; ok {
		t.Error("dept written under its default name")
	}
}

func TestMintErrors(t *testing.T) {
	now := time.Now()
	secret := []byte(strings.Repeat("s", 32))
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ec384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		o    MintOptions
		want string
	}{
		{"no issuer", MintOptions{Key: secret}, "issuer is required"},
		{"alg none", MintOptions{Issuer: "i", Alg: "none", Key: secret}, "unsupported algorithm"},
		{"short secret", MintOptions{Issuer: "i", Key: []byte("short")}, "shorter than 32 bytes"},
		{"no key", MintOptions{Issuer: "i"}, "no key"},
		{"rsa key for hs256", MintOptions{Issuer: "i", Key: rsaKey}, "does not fit HS256"},
		{"secret for rs256", MintOptions{Issuer: "i", Alg: "RS256", Key: secret}, "does not fit RS256"},
		{"p384 for es256", MintOptions{Issuer: "i", Alg: "ES256", Key: ec384}, "P-384"},
		{"bad budget", MintOptions{Issuer: "i", Key: secret, Budgets: []BudgetClaim{{Scope: "x", Period: "day"}}}, "unknown scope"},
		{"claim clash", MintOptions{Issuer: "i", Key: secret, Team: "t", Claims: config.ClaimNames{Team: "iss"}}, "used twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Mint(tc.o, now)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Mint error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestMintAlgorithms(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		alg      string
		key, pub any
	}{
		{"HS384", strings.Repeat("x", 48), []byte(strings.Repeat("x", 48))},
		{"RS256", rsaKey, &rsaKey.PublicKey},
		{"ES256", ecKey, &ecKey.PublicKey},
		{"EdDSA", edKey, edKey.Public()},
	}
	for _, tc := range tests {
		t.Run(tc.alg, func(t *testing.T) {
			tok, err := Mint(MintOptions{Issuer: "i", Alg: tc.alg, Key: tc.key}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			p := jwt.NewParser(jwt.WithValidMethods([]string{tc.alg}), jwt.WithExpirationRequired())
			if _, err := p.Parse(tok, func(*jwt.Token) (any, error) { return tc.pub, nil }); err != nil {
				t.Fatal(err)
			}
		})
	}
}
