package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/pkg/config"
)

var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// testClock is a settable clock safe for concurrent reads.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.set(t)
	return c
}

func (c *testClock) now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *testClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }
func (c *testClock) add(d time.Duration)  { c.ns.Add(int64(d)) }
func (c *testClock) fn() func() time.Time { return c.now }

// renamed are the claim names of the "renamed" test issuer.
var renamed = config.ClaimNames{Subject: "email", KeyID: "key", Dept: "department", Team: "grp",
	Project: "proj", Models: "allowed_models", Budgets: "limits", RPM: "req_per_min", TPM: "tok_per_min",
	Admin: "is_admin"}

// testAuth returns the issuers the tests verify against:
//
//	hs:      HS256/384/512, inline secret, audience "tollgate"
//	rs:      RS256, public_key_file with kid rs1
//	es:      ES256, inline PEM without kid
//	ed:      EdDSA, inline PEM without kid
//	jwks:    RS256, ES256, EdDSA from a JWKS file, kids j-rs, j-es, j-ed
//	rot:     HS256, two secrets with kids old and new
//	mixed:   HS256 and RS256, a secret without kid and an RSA key with kid m-rs
//	renamed: HS256 from secret_file, claims renamed
func testAuth(t testing.TB) config.Auth {
	k := genTestKeys()
	dir := t.TempDir()
	return config.Auth{Issuers: []config.Issuer{
		{Name: "hs", Issuer: "https://hs.test", Audience: "tollgate", Algorithms: []string{"HS256", "HS384", "HS512"},
			Keys: []config.Key{{Secret: string(k.secret2)}}},
		{Name: "rs", Issuer: "https://rs.test", Algorithms: []string{"RS256"},
			Keys: []config.Key{{KID: "rs1", PublicKeyFile: writeFile(t, dir, "rs.pem", pubPEM(t, &k.rsa.PublicKey))}}},
		{Name: "es", Issuer: "https://es.test", Algorithms: []string{"ES256"},
			Keys: []config.Key{{PublicKey: pubPEM(t, &k.ec.PublicKey)}}},
		{Name: "ed", Issuer: "https://ed.test", Algorithms: []string{"EdDSA"},
			Keys: []config.Key{{PublicKey: pubPEM(t, k.ed.Public())}}},
		{Name: "jwks", Issuer: "https://jwks.test", Algorithms: []string{"RS256", "ES256", "EdDSA"},
			JWKSFile: writeJWKS(t, dir, jwkOf(t, "j-rs", &k.rsa2.PublicKey), jwkOf(t, "j-es", &k.ec2.PublicKey),
				jwkOf(t, "j-ed", k.ed2.Public()))},
		{Name: "rot", Issuer: "https://rot.test", Algorithms: []string{"HS256"},
			Keys: []config.Key{{KID: "old", Secret: string(k.secret)}, {KID: "new", Secret: string(k.secret2)}}},
		{Name: "mixed", Issuer: "https://mixed.test", Algorithms: []string{"HS256", "RS256"},
			Keys: []config.Key{{Secret: string(k.secret)}, {KID: "m-rs", PublicKey: pubPEM(t, &k.rsa.PublicKey)}}},
		{Name: "renamed", Issuer: "https://renamed.test", Algorithms: []string{"HS256"}, Claims: renamed,
			Keys: []config.Key{{SecretFile: writeFile(t, dir, "secret", string(k.secret)+"\n")}}},
	}}
}

func newTestVerifier(t testing.TB, cfg config.Auth, clock func() time.Time) *Verifier {
	t.Helper()
	v, err := NewVerifier(cfg, clock)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mint signs a token at testNow, failing the test on error.
func mint(t testing.TB, o MintOptions) string {
	t.Helper()
	tok, err := Mint(o, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rawToken builds a token from literal header and payload JSON, signed with
// m and key; m nil leaves the signature empty.
func rawToken(t testing.TB, header, payload string, m jwt.SigningMethod, key any) string {
	t.Helper()
	enc := base64.RawURLEncoding
	s := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	if m == nil {
		return s + "."
	}
	sig, err := m.Sign(s, key)
	if err != nil {
		t.Fatal(err)
	}
	return s + "." + enc.EncodeToString(sig)
}

// payload returns claims JSON for iss valid at testNow, with extra members
// appended verbatim.
func payload(iss string, extra ...string) string {
	p := fmt.Sprintf(`{"iss":%q,"sub":"alice","jti":"k1","iat":%d,"exp":%d`,
		iss, testNow.Unix(), testNow.Add(time.Hour).Unix())
	for _, e := range extra {
		p += "," + e
	}
	return p + "}"
}

func TestVerifyAccepts(t *testing.T) {
	k := genTestKeys()
	v := newTestVerifier(t, testAuth(t), func() time.Time { return testNow })
	tests := []struct {
		name string
		o    MintOptions
	}{
		{"HS256", MintOptions{Issuer: "https://hs.test", Audience: "tollgate", Key: k.secret2}},
		{"HS384", MintOptions{Issuer: "https://hs.test", Audience: "tollgate", Alg: "HS384", Key: k.secret2}},
		{"HS512", MintOptions{Issuer: "https://hs.test", Audience: "tollgate", Alg: "HS512", Key: k.secret2}},
		{"RS256 with kid", MintOptions{Issuer: "https://rs.test", Alg: "RS256", KID: "rs1", Key: k.rsa}},
		{"RS256 without kid, all keys have one", MintOptions{Issuer: "https://rs.test", Alg: "RS256", Key: k.rsa}},
		{"ES256", MintOptions{Issuer: "https://es.test", Alg: "ES256", Key: k.ec}},
		{"EdDSA", MintOptions{Issuer: "https://ed.test", Alg: "EdDSA", Key: k.ed}},
		{"jwks RS256", MintOptions{Issuer: "https://jwks.test", Alg: "RS256", KID: "j-rs", Key: k.rsa2}},
		{"jwks ES256", MintOptions{Issuer: "https://jwks.test", Alg: "ES256", KID: "j-es", Key: k.ec2}},
		{"jwks EdDSA", MintOptions{Issuer: "https://jwks.test", Alg: "EdDSA", KID: "j-ed", Key: k.ed2}},
		{"jwks EdDSA without kid", MintOptions{Issuer: "https://jwks.test", Alg: "EdDSA", Key: k.ed2}},
		{"rotation old kid", MintOptions{Issuer: "https://rot.test", KID: "old", Key: k.secret}},
		{"rotation new kid", MintOptions{Issuer: "https://rot.test", KID: "new", Key: k.secret2}},
		{"rotation without kid tries all", MintOptions{Issuer: "https://rot.test", Key: k.secret}},
		{"mixed HS256 without kid", MintOptions{Issuer: "https://mixed.test", Key: k.secret}},
		{"mixed RS256 with kid", MintOptions{Issuer: "https://mixed.test", Alg: "RS256", KID: "m-rs", Key: k.rsa}},
		{"secret_file trailing newline trimmed", MintOptions{Issuer: "https://renamed.test", Key: k.secret, Claims: renamed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Subject = "alice"
			p, err := v.Verify([]byte(mint(t, tc.o)))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if p.Subject != "alice" || p.ExpiresAt.IsZero() {
				t.Errorf("principal = %+v", p)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	k := genTestKeys()
	v := newTestVerifier(t, testAuth(t), func() time.Time { return testNow })
	rsPEM := []byte(pubPEM(t, &k.rsa.PublicKey))
	hs := MintOptions{Issuer: "https://hs.test", Audience: "tollgate", Key: k.secret2}
	with := func(f func(*MintOptions)) MintOptions {
		o := hs
		f(&o)
		return o
	}
	valid := mint(t, hs)
	hsHeader := `{"alg":"HS256","typ":"JWT"}`
	tests := []struct {
		name  string
		token string
		want  string // reason in the error message
	}{
		{"alg none", rawToken(t, `{"alg":"none","typ":"JWT"}`, payload("https://hs.test", `"aud":"tollgate"`), nil, nil), "algorithm not allowed"},
		{"alg none with signature", rawToken(t, `{"alg":"none"}`, payload("https://hs.test", `"aud":"tollgate"`), jwt.SigningMethodHS256, k.secret2), "algorithm not allowed"},
		{"alg missing", rawToken(t, `{"typ":"JWT"}`, payload("https://hs.test", `"aud":"tollgate"`), jwt.SigningMethodHS256, k.secret2), "algorithm not allowed"},
		{"HS/RS confusion, RS256-only issuer", rawToken(t, hsHeader, payload("https://rs.test"), jwt.SigningMethodHS256, rsPEM), "algorithm not allowed"},
		{"HS/RS confusion, kid of the RSA key", rawToken(t, `{"alg":"HS256","kid":"m-rs"}`, payload("https://mixed.test"), jwt.SigningMethodHS256, rsPEM), "key does not match algorithm"},
		{"HS/RS confusion, no kid", rawToken(t, hsHeader, payload("https://mixed.test"), jwt.SigningMethodHS256, rsPEM), "signature is invalid"},
		{"expired beyond leeway", rawToken(t, hsHeader, fmt.Sprintf(`{"iss":"https://hs.test","aud":"tollgate","exp":%d}`, testNow.Add(-time.Minute).Unix()), jwt.SigningMethodHS256, k.secret2), "token is expired"},
		{"not yet valid", rawToken(t, hsHeader, fmt.Sprintf(`{"iss":"https://hs.test","aud":"tollgate","nbf":%d,"exp":%d}`, testNow.Add(5*time.Minute).Unix(), testNow.Add(time.Hour).Unix()), jwt.SigningMethodHS256, k.secret2), "token is not valid yet"},
		{"issued in the future", rawToken(t, hsHeader, fmt.Sprintf(`{"iss":"https://hs.test","aud":"tollgate","iat":%d,"exp":%d}`, testNow.Add(5*time.Minute).Unix(), testNow.Add(time.Hour).Unix()), jwt.SigningMethodHS256, k.secret2), "token used before issued"},
		{"wrong aud", mint(t, with(func(o *MintOptions) { o.Audience = "other" })), "invalid audience"},
		{"missing aud", mint(t, with(func(o *MintOptions) { o.Audience = "" })), "token has no audience"},
		{"wrong iss behind a matching one", rawToken(t, hsHeader, payload("https://hs.test", `"aud":"tollgate"`, `"iss":"https://evil.test"`), jwt.SigningMethodHS256, k.secret2), "invalid issuer"},
		{"unknown iss", mint(t, with(func(o *MintOptions) { o.Issuer = "https://evil.test" })), "unknown issuer"},
		{"no iss", rawToken(t, hsHeader, fmt.Sprintf(`{"aud":"tollgate","exp":%d}`, testNow.Add(time.Hour).Unix()), jwt.SigningMethodHS256, k.secret2), "unknown issuer"},
		{"iss not a string", rawToken(t, hsHeader, fmt.Sprintf(`{"iss":1,"exp":%d}`, testNow.Add(time.Hour).Unix()), jwt.SigningMethodHS256, k.secret2), "unknown issuer"},
		{"bad signature", flipSignature(valid), "signature is invalid"},
		{"signature stripped", valid[:strings.LastIndexByte(valid, '.')+1], "signature is invalid"},
		{"payload swapped", swapPayload(valid, payload("https://hs.test", `"aud":"tollgate"`, `"admin":true`)), "signature is invalid"},
		{"unknown kid", mint(t, MintOptions{Issuer: "https://rot.test", KID: "gone", Key: k.secret}), "unknown kid"},
		{"kid not a string", rawToken(t, `{"alg":"HS256","kid":7}`, payload("https://rot.test"), jwt.SigningMethodHS256, k.secret), "unknown kid"},
		{"missing exp", rawToken(t, hsHeader, `{"iss":"https://hs.test","aud":"tollgate"}`, jwt.SigningMethodHS256, k.secret2), "token has no exp"},
		{"null exp", rawToken(t, hsHeader, `{"iss":"https://hs.test","aud":"tollgate","exp":null}`, jwt.SigningMethodHS256, k.secret2), "token has no exp"},
		{"exp not a number", rawToken(t, hsHeader, `{"iss":"https://hs.test","aud":"tollgate","exp":"soon"}`, jwt.SigningMethodHS256, k.secret2), "invalid claim exp"},
		{"algorithm not pinned", mint(t, MintOptions{Issuer: "https://rot.test", Alg: "HS512", KID: "old", Key: k.secret}), "algorithm not allowed"},
		{"RS256 for an HMAC issuer", mint(t, MintOptions{Issuer: "https://hs.test", Audience: "tollgate", Alg: "RS256", Key: k.rsa}), "algorithm not allowed"},
		{"PS256 is not supported", rawToken(t, `{"alg":"PS256"}`, payload("https://rs.test"), jwt.SigningMethodPS256, k.rsa), "algorithm not allowed"},
		{"issuer A signed with issuer B's secret", mint(t, with(func(o *MintOptions) { o.Key = k.secret })), "signature is invalid"},
		{"issuer A signed with issuer B's RSA key", mint(t, MintOptions{Issuer: "https://rs.test", Alg: "RS256", KID: "rs1", Key: k.rsa2}), "signature is invalid"},
		{"issuer A signed with issuer B's EC key", mint(t, MintOptions{Issuer: "https://es.test", Alg: "ES256", Key: k.ec2}), "signature is invalid"},
		{"issuer A signed with issuer B's Ed25519 key", mint(t, MintOptions{Issuer: "https://ed.test", Alg: "EdDSA", Key: k.ed2}), "signature is invalid"},
		{"jwks kid of another key type", mint(t, MintOptions{Issuer: "https://jwks.test", Alg: "ES256", KID: "j-rs", Key: k.ec2}), "key does not match algorithm"},
		{"models null", rawToken(t, hsHeader, payload("https://hs.test", `"aud":"tollgate"`, `"models":null`), jwt.SigningMethodHS256, k.secret2), "invalid claim models"},
		{"models not strings", rawToken(t, hsHeader, payload("https://hs.test", `"aud":"tollgate"`, `"models":[1]`), jwt.SigningMethodHS256, k.secret2), "invalid claim models"},
		{"budget scope unknown", rawToken(t, hsHeader, payload("https://hs.test", `"aud":"tollgate"`, `"budgets":[{"scope":"planet","value":"*","amount_usd":1,"period":"day"}]`), jwt.SigningMethodHS256, k.secret2), "invalid claim budgets"},
		{"rpm negative", rawToken(t, hsHeader, payload("https://hs.test", `"aud":"tollgate"`, `"rpm":-1`), jwt.SigningMethodHS256, k.secret2), "invalid claim rpm"},
		{"tpm fractional", rawToken(t, hsHeader, payload("https://hs.test", `"aud":"tollgate"`, `"tpm":1.5`), jwt.SigningMethodHS256, k.secret2), "invalid claim tpm"},
		{"tpm string", rawToken(t, hsHeader, payload("https://hs.test", `"aud":"tollgate"`, `"tpm":"10"`), jwt.SigningMethodHS256, k.secret2), "invalid claim tpm"},
		{"dept not a string", rawToken(t, hsHeader, payload("https://hs.test", `"aud":"tollgate"`, `"dept":{}`), jwt.SigningMethodHS256, k.secret2), "invalid claim dept"},
		{"garbage", "garbage", "token is malformed"},
		{"two segments", "a.b", "token is malformed"},
		{"empty segments", "..", "token is malformed"},
		{"four segments", valid + ".x", "token is malformed"},
		{"bad base64 payload", "eyJhbGciOiJIUzI1NiJ9.!!!.sig", "token is malformed"},
		{"payload not json", "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte("hello")) + ".sig", "token is malformed"},
		{"header not json", "e30x." + strings.SplitN(valid, ".", 3)[1] + ".sig", "token is malformed"},
		{"too long", strings.Repeat("a", maxTokenLen+1), "token is too long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify([]byte(tc.token))
			if err == nil {
				t.Fatalf("Verify accepted the token: %+v", p)
			}
			if !errors.Is(err, ErrInvalidToken) {
				t.Errorf("error %v does not wrap ErrInvalidToken", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// flipSignature changes the first character of the token's signature.
func flipSignature(tok string) string {
	i := strings.LastIndexByte(tok, '.') + 1
	c := byte('A')
	if tok[i] == 'A' {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}

// swapPayload replaces the token's payload, keeping header and signature.
func swapPayload(tok, payload string) string {
	parts := strings.Split(tok, ".")
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(payload))
	return strings.Join(parts, ".")
}

func TestVerifyNoToken(t *testing.T) {
	v := newTestVerifier(t, testAuth(t), nil)
	if _, err := v.Verify(nil); !errors.Is(err, ErrNoToken) {
		t.Fatalf("Verify(nil) = %v, want ErrNoToken", err)
	}
}

func TestVerifyLeeway(t *testing.T) {
	k := genTestKeys()
	clock := newTestClock(testNow)
	rot := testAuth(t).Issuers[5] // HS256, default leeway 30s
	tok := []byte(mint(t, MintOptions{Issuer: rot.Issuer, KID: "new", Key: k.secret2, TTL: time.Minute}))
	tests := []struct {
		name string
		at   time.Duration
		ok   bool
	}{
		{"10s before nbf", -10 * time.Second, true},
		{"40s before nbf", -40 * time.Second, false},
		{"10s after exp", time.Minute + 10*time.Second, true},
		{"40s after exp", time.Minute + 40*time.Second, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{rot}, CacheSize: -1}, clock.fn())
			clock.set(testNow.Add(tc.at))
			if _, err := v.Verify(tok); (err == nil) != tc.ok {
				t.Fatalf("Verify at %s: %v, want ok=%v", tc.at, err, tc.ok)
			}
		})
	}
}

func TestKeyRotation(t *testing.T) {
	k := genTestKeys()
	cfg := testAuth(t)
	rot := cfg.Issuers[5]
	oldTok := mint(t, MintOptions{Issuer: rot.Issuer, KID: "old", Key: k.secret})
	newTok := mint(t, MintOptions{Issuer: rot.Issuer, KID: "new", Key: k.secret2})
	newOnly := rot
	newOnly.Keys = rot.Keys[1:]
	tests := []struct {
		name         string
		keys         config.Issuer
		oldOK, newOK bool
	}{
		{"both keys", rot, true, true},
		{"old key removed", newOnly, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{tc.keys}}, func() time.Time { return testNow })
			if _, err := v.Verify([]byte(oldTok)); (err == nil) != tc.oldOK {
				t.Errorf("old-kid token: %v, want ok=%v", err, tc.oldOK)
			}
			if _, err := v.Verify([]byte(newTok)); (err == nil) != tc.newOK {
				t.Errorf("new-kid token: %v, want ok=%v", err, tc.newOK)
			}
		})
	}
}

func TestVerifyKIDlessKeysPreferred(t *testing.T) {
	// A token without kid is checked against the keys without kid only, when
	// the issuer has some: a kid-bound key must not verify it.
	k := genTestKeys()
	iss := config.Issuer{Name: "n", Issuer: "https://n.test", Algorithms: []string{"HS256"},
		Keys: []config.Key{{Secret: string(k.secret)}, {KID: "only-kid", Secret: string(k.secret2)}}}
	v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{iss}}, func() time.Time { return testNow })
	tests := []struct {
		name string
		o    MintOptions
		want string
	}{
		{"kidless key", MintOptions{Issuer: iss.Issuer, Key: k.secret}, ""},
		{"kid-bound key without kid", MintOptions{Issuer: iss.Issuer, Key: k.secret2}, "signature is invalid"},
		{"kid-bound key with kid", MintOptions{Issuer: iss.Issuer, KID: "only-kid", Key: k.secret2}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify([]byte(mint(t, tc.o)))
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Verify = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestVerifyClaims(t *testing.T) {
	k := genTestKeys()
	v := newTestVerifier(t, testAuth(t), func() time.Time { return testNow })
	budgets := []BudgetClaim{
		{Scope: "team", Value: "infra", AmountUSD: 250, Period: "month"},
		{Scope: "key", Value: "*", AmountUSD: 1.5, Period: "day"},
	}
	full := MintOptions{Subject: "alice@example.com", KeyID: "key-1", Dept: "eng", Team: "infra", Project: "chat",
		Models: []string{"gpt-4o*", "openai/*"}, Budgets: budgets, RPM: 60, TPM: 100000, Admin: true, TTL: time.Hour}
	want := Principal{Subject: "alice@example.com", KeyID: "key-1", Dept: "eng", Team: "infra", Project: "chat",
		Models: []string{"gpt-4o*", "openai/*"}, Budgets: budgets, RPM: 60, TPM: 100000, Admin: true,
		ExpiresAt: testNow.Add(time.Hour), NotBefore: testNow}
	tests := []struct {
		name  string
		token string
		want  Principal
	}{
		{"default names", mint(t, withIssuer(full, "https://hs.test", "tollgate", k.secret2, config.ClaimNames{})), withName(want, "hs")},
		{"renamed claims", mint(t, withIssuer(full, "https://renamed.test", "", k.secret, renamed)), withName(want, "renamed")},
		{"default names to a renaming issuer", mint(t, withIssuer(full, "https://renamed.test", "", k.secret, config.ClaimNames{})),
			Principal{Issuer: "renamed", Dept: NoDept, ExpiresAt: testNow.Add(time.Hour), NotBefore: testNow}},
		{"no optional claims", mint(t, MintOptions{Issuer: "https://hs.test", Audience: "tollgate", KeyID: "k", Key: k.secret2}),
			Principal{Issuer: "hs", KeyID: "k", Dept: NoDept, ExpiresAt: testNow.Add(DefaultMintTTL), NotBefore: testNow}},
		{"empty models allow none", mint(t, MintOptions{Issuer: "https://hs.test", Audience: "tollgate", KeyID: "k", Key: k.secret2, Models: []string{}}),
			Principal{Issuer: "hs", KeyID: "k", Dept: NoDept, Models: []string{}, ExpiresAt: testNow.Add(DefaultMintTTL), NotBefore: testNow}},
		{"single model string, integral float rpm, admin not true", rawToken(t, `{"alg":"HS256"}`,
			fmt.Sprintf(`{"iss":"https://hs.test","aud":["x","tollgate"],"exp":%d,"models":"gpt-4o","rpm":60.0,"admin":"true"}`, testNow.Add(time.Hour).Unix()),
			jwt.SigningMethodHS256, k.secret2),
			Principal{Issuer: "hs", Dept: NoDept, Models: []string{"gpt-4o"}, RPM: 60, ExpiresAt: testNow.Add(time.Hour)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify([]byte(tc.token))
			if err != nil {
				t.Fatal(err)
			}
			got := *p
			got.ExpiresAt = got.ExpiresAt.UTC()
			if !got.NotBefore.IsZero() {
				got.NotBefore = got.NotBefore.UTC()
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("principal\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func withIssuer(o MintOptions, iss, aud string, key []byte, names config.ClaimNames) MintOptions {
	o.Issuer, o.Audience, o.Key, o.Claims = iss, aud, key, names
	return o
}

func withName(p Principal, issuer string) Principal {
	p.Issuer = issuer
	return p
}

func TestVerifyCache(t *testing.T) {
	k := genTestKeys()
	clock := newTestClock(testNow)
	iss := testAuth(t).Issuers[5] // rot: HS256, leeway 30s
	tok := []byte(mint(t, MintOptions{Issuer: iss.Issuer, KID: "new", Key: k.secret2, TTL: time.Minute}))

	t.Run("hit returns the same principal", func(t *testing.T) {
		clock.set(testNow)
		v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{iss}}, clock.fn())
		p1, err := v.Verify(tok)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := v.Verify(append([]byte(nil), tok...))
		if err != nil {
			t.Fatal(err)
		}
		if p1 != p2 {
			t.Error("second Verify did not come from the cache")
		}
	})
	t.Run("hit rejects a token expired since it was cached", func(t *testing.T) {
		clock.set(testNow)
		v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{iss}}, clock.fn())
		if _, err := v.Verify(tok); err != nil {
			t.Fatal(err)
		}
		clock.add(time.Minute + 20*time.Second) // within leeway
		if _, err := v.Verify(tok); err != nil {
			t.Fatalf("within leeway: %v", err)
		}
		clock.add(20 * time.Second)
		if _, err := v.Verify(tok); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("after exp+leeway: %v, want token is expired", err)
		}
	})
	t.Run("hit rejects a token before nbf", func(t *testing.T) {
		clock.set(testNow)
		v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{iss}}, clock.fn())
		if _, err := v.Verify(tok); err != nil {
			t.Fatal(err)
		}
		clock.set(testNow.Add(-time.Minute)) // clock stepped back
		if _, err := v.Verify(tok); err == nil || !strings.Contains(err.Error(), "not valid yet") {
			t.Fatalf("before nbf: %v, want token is not valid yet", err)
		}
	})
	t.Run("failures are not cached", func(t *testing.T) {
		clock.set(testNow.Add(-time.Minute))
		v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{iss}}, clock.fn())
		if _, err := v.Verify(tok); err == nil {
			t.Fatal("accepted before nbf")
		}
		clock.set(testNow)
		if _, err := v.Verify(tok); err != nil {
			t.Fatalf("once valid: %v", err)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		clock.set(testNow)
		v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{iss}, CacheSize: -1}, clock.fn())
		p1, err1 := v.Verify(tok)
		p2, err2 := v.Verify(tok)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if p1 == p2 {
			t.Error("principal cached with cache_size -1")
		}
	})
}

func TestAllowsModel(t *testing.T) {
	tests := []struct {
		name   string
		models []string
		model  string
		want   bool
	}{
		{"nil allows all", nil, "anything", true},
		{"empty allows none", []string{}, "gpt-4o", false},
		{"exact", []string{"gpt-4o"}, "gpt-4o", true},
		{"exact other", []string{"gpt-4o"}, "gpt-4o-mini", false},
		{"prefix glob", []string{"gpt-4o*"}, "gpt-4o-mini", true},
		{"prefix glob no match", []string{"gpt-4o*"}, "gpt-5", false},
		{"provider glob", []string{"openai/*"}, "openai/gpt-4o", true},
		{"star does not cross slash", []string{"openai/*"}, "openai/a/b", false},
		{"star alone", []string{"*"}, "claude-3", true},
		{"question mark", []string{"gpt-?"}, "gpt-5", true},
		{"class", []string{"llama-[0-9]*"}, "llama-3-70b", true},
		{"second glob", []string{"claude-*", "gemini-*"}, "gemini-pro", true},
		{"malformed glob matches nothing", []string{"gpt-["}, "gpt-[", true},
		{"malformed glob", []string{"gpt-[*"}, "gpt-4", false},
		{"empty model", []string{"*"}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &Principal{Models: tc.models}
			if got := p.AllowsModel(tc.model); got != tc.want {
				t.Errorf("AllowsModel(%q) with %q = %v, want %v", tc.model, tc.models, got, tc.want)
			}
		})
	}
}

func TestBearerToken(t *testing.T) {
	tests := []struct {
		name, header, want string
		ok                 bool
	}{
		{"plain", "Bearer abc.def.ghi", "abc.def.ghi", true},
		{"lower case scheme", "bearer abc", "abc", true},
		{"upper case scheme", "BEARER abc", "abc", true},
		{"extra spaces", "  Bearer   abc  ", "abc", true},
		{"tab", "Bearer\tabc", "abc", true},
		{"empty", "", "", false},
		{"scheme only", "Bearer", "", false},
		{"scheme and space", "Bearer ", "", false},
		{"scheme and spaces", "Bearer    ", "", false},
		{"no space", "Bearerabc", "", false},
		{"basic", "Basic dXNlcjpwYXNz", "", false},
		{"token only", "abc.def.ghi", "", false},
		{"two tokens", "Bearer abc def", "", false},
		{"control character", "Bearer abc\x00", "", false},
		{"newline", "Bearer abc\ndef", "", false},
		{"similar scheme", "Bearex abc", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := BearerToken([]byte(tc.header))
			if (got != nil) != tc.ok || string(got) != tc.want {
				t.Errorf("BearerToken(%q) = %q (nil %v), want %q", tc.header, got, got == nil, tc.want)
			}
		})
	}
}

// TestTokenChars checks the word-at-a-time token check against the
// byte-at-a-time rule on every byte value at every position of tokens of
// several lengths.
func TestTokenChars(t *testing.T) {
	slow := func(b []byte) bool {
		for _, c := range b {
			if c <= ' ' || c == 0x7f {
				return false
			}
		}
		return true
	}
	for n := 1; n <= 40; n++ {
		tok := []byte(strings.Repeat("eyJhbGciOi", 4)[:n])
		for i := range tok {
			orig := tok[i]
			for c := range 256 {
				tok[i] = byte(c)
				if got, want := tokenChars(tok), slow(tok); got != want {
					t.Fatalf("tokenChars(%q) = %v, want %v", tok, got, want)
				}
			}
			tok[i] = orig
		}
	}
}

func TestBearerTokenNoAlloc(t *testing.T) {
	h := []byte("Bearer abc.def.ghi")
	if n := testing.AllocsPerRun(100, func() { BearerToken(h) }); n != 0 {
		t.Errorf("BearerToken allocates %v times", n)
	}
}

func TestVerifyCachedNoAlloc(t *testing.T) {
	k := genTestKeys()
	v := newTestVerifier(t, testAuth(t), func() time.Time { return testNow })
	tok := []byte(mint(t, MintOptions{Issuer: "https://hs.test", Audience: "tollgate", Key: k.secret2, Models: []string{"gpt-4o*"}}))
	if _, err := v.Verify(tok); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(100, func() {
		p, err := v.Verify(tok)
		if err != nil || !p.AllowsModel("gpt-4o-mini") {
			t.Fatal("cached token refused")
		}
	})
	if n != 0 {
		t.Errorf("cached Verify allocates %v times", n)
	}
}

func TestVerifyConcurrent(t *testing.T) {
	k := genTestKeys()
	v := newTestVerifier(t, config.Auth{Issuers: testAuth(t).Issuers, CacheSize: 3}, func() time.Time { return testNow })
	var toks [][]byte
	for i := range 6 {
		toks = append(toks, []byte(mint(t, MintOptions{Issuer: "https://rot.test", KID: "new", Key: k.secret2, Subject: fmt.Sprint(i)})))
	}
	done := make(chan error)
	for g := range 4 {
		go func() {
			var err error
			for i := range 60 {
				tok := toks[(g+i)%len(toks)]
				p, verr := v.Verify(tok)
				if verr != nil || p.Subject != fmt.Sprint((g+i)%len(toks)) {
					err = fmt.Errorf("token %d: principal %+v, error %v", (g+i)%len(toks), p, verr)
					break
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
