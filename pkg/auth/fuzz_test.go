package auth

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func FuzzVerify(f *testing.F) {
	k := genTestKeys()
	cfg := testAuth(f)
	v := newTestVerifier(f, cfg, func() time.Time { return testNow })
	seeds := []string{
		mint(f, MintOptions{Issuer: "https://hs.test", Audience: "tollgate", Key: k.secret2, Models: []string{"a*"},
			Budgets: []BudgetClaim{{Scope: "team", Value: "*", AmountUSD: 1, Period: "day"}}, RPM: 1, TPM: 2, Admin: true}),
		mint(f, MintOptions{Issuer: "https://rot.test", KID: "old", Key: k.secret}),
		mint(f, MintOptions{Issuer: "https://ed.test", Alg: "EdDSA", Key: k.ed}),
		mint(f, MintOptions{Issuer: "https://renamed.test", Key: k.secret, Claims: renamed, Dept: "d"}),
		rawToken(f, `{"alg":"HS256"}`, `{"iss":"https://rot.test"}`, jwt.SigningMethodHS256, k.secret),
		rawToken(f, `{"alg":"none"}`, payload("https://hs.test"), nil, nil),
		"", ".", "..", "a.b.c", "eyJ9.eyJ9.", strings.Repeat(".", 40),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, token []byte) {
		in := bytes.Clone(token)
		p, err := v.Verify(token)
		if !bytes.Equal(in, token) {
			t.Fatal("Verify changed its input")
		}
		if err != nil {
			if p != nil {
				t.Fatal("principal returned with an error")
			}
			if !errors.Is(err, ErrInvalidToken) && !errors.Is(err, ErrNoToken) {
				t.Fatalf("error %v wraps neither ErrInvalidToken nor ErrNoToken", err)
			}
			return
		}
		if p.ExpiresAt.IsZero() || !testNow.Before(p.ExpiresAt.Add(DefaultLeeway)) {
			t.Fatalf("accepted a token with exp %v at %v", p.ExpiresAt, testNow)
		}
		if p.Issuer == "" {
			t.Fatal("accepted a token without issuer")
		}
	})
}

// bearerRef is a plain reference implementation of BearerToken.
func bearerRef(h string) (string, bool) {
	h = strings.Trim(h, " \t")
	scheme, tok, ok := strings.Cut(h, " ")
	if t2, t3, ok2 := strings.Cut(h, "\t"); ok2 && (!ok || len(t2) < len(scheme)) {
		scheme, tok, ok = t2, t3, true
	}
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.Trim(tok, " \t")
	if tok == "" || strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return "", false
	}
	return tok, true
}

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  a.b.c ", "Basic x", "Bearer", "Bearer\t\tx", "BEARER x y", "\tBearer x\t", "Bearer\x00x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, h []byte) {
		got := BearerToken(h)
		want, ok := bearerRef(string(h))
		if (got != nil) != ok || string(got) != want {
			t.Fatalf("BearerToken(%q) = %q, reference %q (ok %v)", h, got, want, ok)
		}
	})
}
