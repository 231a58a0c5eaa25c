package auth

import (
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

func TestNewVerifierConfigErrors(t *testing.T) {
	k := genTestKeys()
	dir := t.TempDir()
	secret := string(k.secret)
	rsaPEM := pubPEM(t, &k.rsa.PublicKey)
	edPEM := pubPEM(t, k.ed.Public())
	privDER, err := x509.MarshalPKCS8PrivateKey(k.ec)
	if err != nil {
		t.Fatal(err)
	}
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))
	missing := filepath.Join(dir, "missing")
	hs := func(keys ...config.Key) config.Issuer {
		return config.Issuer{Name: "dev", Issuer: "https://dev.test", Algorithms: []string{"HS256"}, Keys: keys}
	}
	with := func(is config.Issuer, f func(*config.Issuer)) config.Issuer {
		f(&is)
		return is
	}
	ok := hs(config.Key{Secret: secret})
	tests := []struct {
		name string
		auth config.Auth
		want []string // substrings of the error
	}{
		{"no name", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Name = "" })}}, []string{"issuer #0", "name is required"}},
		{"no iss", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Issuer = "" })}}, []string{`"dev"`, "issuer (the expected iss claim) is required"}},
		{"duplicate name", config.Auth{Issuers: []config.Issuer{ok, with(ok, func(i *config.Issuer) { i.Issuer = "other" })}}, []string{`"dev"`, "name is used twice"}},
		{"duplicate iss", config.Auth{Issuers: []config.Issuer{ok, with(ok, func(i *config.Issuer) { i.Name = "dev2" })}}, []string{`"dev2"`, `also used by "dev"`}},
		{"no algorithms", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Algorithms = nil })}}, []string{`"dev"`, "algorithms are required"}},
		{"alg none", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Algorithms = []string{"HS256", "none"} })}}, []string{`"dev"`, `algorithm "none" is not supported`}},
		{"unknown alg", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Algorithms = []string{"RS512"} })}}, []string{`algorithm "RS512" is not supported`}},
		{"lower case alg", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Algorithms = []string{"hs256"} })}}, []string{`algorithm "hs256" is not supported`}},
		{"negative leeway", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Leeway = -time.Second })}}, []string{"leeway -1s is negative"}},
		{"no keys", config.Auth{Issuers: []config.Issuer{hs()}}, []string{`"dev"`, "no keys"}},
		{"key without material", config.Auth{Issuers: []config.Issuer{hs(config.Key{KID: "a"})}}, []string{`key 0 (kid "a")`, "set exactly one"}},
		{"key with two sources", config.Auth{Issuers: []config.Issuer{hs(config.Key{Secret: secret, SecretFile: "x"})}}, []string{"key 0", "set exactly one"}},
		{"short secret", config.Auth{Issuers: []config.Issuer{hs(config.Key{Secret: "short-secret"})}}, []string{"key 0", "shorter than 32 bytes"}},
		{"secret for RS256", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Algorithms = []string{"RS256"} })}}, []string{"key 0", "hmac key fits none of the issuer's algorithms"}},
		{"RSA key for HS256", config.Auth{Issuers: []config.Issuer{hs(config.Key{KID: "r", PublicKey: rsaPEM})}}, []string{`key 0 (kid "r")`, "rsa key fits none"}},
		{"Ed25519 key for ES256", config.Auth{Issuers: []config.Issuer{with(hs(config.Key{PublicKey: edPEM}), func(i *config.Issuer) { i.Algorithms = []string{"ES256"} })}}, []string{"ed25519 key fits none"}},
		{"pinned alg without key", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Algorithms = []string{"HS256", "EdDSA"} })}}, []string{"algorithm EdDSA has no key"}},
		{"missing secret_file", config.Auth{Issuers: []config.Issuer{hs(config.Key{SecretFile: missing})}}, []string{`"dev"`, "key 0", "read secret_file", "missing"}},
		{"missing public_key_file", config.Auth{Issuers: []config.Issuer{with(hs(config.Key{PublicKeyFile: missing}), func(i *config.Issuer) { i.Algorithms = []string{"RS256"} })}}, []string{"key 0", "read public_key_file"}},
		{"missing jwks_file", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.JWKSFile = missing })}}, []string{`"dev"`, "read jwks_file"}},
		{"not PEM", config.Auth{Issuers: []config.Issuer{hs(config.Key{PublicKey: "hello"})}}, []string{"key 0", "no PEM block"}},
		{"private key PEM", config.Auth{Issuers: []config.Issuer{hs(config.Key{PublicKey: privPEM})}}, []string{"key 0", `"PRIVATE KEY" is not a public key`}},
		{"jwks not json", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.JWKSFile = writeFile(t, dir, "bad.json", "{") })}}, []string{"jwks_file"}},
		{"jwks rsa without n", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) {
			i.Algorithms = []string{"RS256"}
			i.Keys = nil
			i.JWKSFile = writeFile(t, dir, "non.json", `{"keys":[{"kty":"RSA","kid":"x","e":"AQAB"}]}`)
		})}}, []string{`jwks key 0 (kid "x")`, `member "n" is missing`}},
		{"jwks ec point off the curve", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) {
			i.Algorithms = []string{"ES256"}
			i.Keys = nil
			i.JWKSFile = writeFile(t, dir, "offcurve.json", `{"keys":[{"kty":"EC","crv":"P-256","x":"`+b64(make([]byte, 32))+`","y":"`+b64(make([]byte, 32))+`"}]}`)
		})}}, []string{"jwks key 0", "ec point"}},
		{"jwks with only unusable keys", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) {
			i.Algorithms = []string{"EdDSA"}
			i.Keys = nil
			i.JWKSFile = writeJWKS(t, dir, jwkOf(t, "r", &k.rsa.PublicKey))
		})}}, []string{"no keys"}},
		{"duplicate kid", config.Auth{Issuers: []config.Issuer{hs(config.Key{KID: "a", Secret: secret}, config.Key{KID: "a", Secret: string(k.secret2)})}}, []string{`key 1 (kid "a"): kid "a" is also used by key 0`}},
		{"claim renamed onto exp", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Claims.Dept = "exp" })}}, []string{`"exp" is a registered claim`}},
		{"two fields on one claim", config.Auth{Issuers: []config.Issuer{with(ok, func(i *config.Issuer) { i.Claims.Dept = "team" })}}, []string{`"team" names two principal fields`}},
		{"cache size", config.Auth{CacheSize: -2}, []string{"cache_size -2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.auth, nil)
			if err == nil {
				t.Fatalf("NewVerifier accepted the config: %+v", v)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error = %q, want it to contain %q", err, w)
				}
			}
			for _, s := range []string{secret, string(k.secret2)} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q shows a secret", err)
				}
			}
		})
	}
}

func TestNewVerifierKeySources(t *testing.T) {
	k := genTestKeys()
	dir := t.TempDir()
	rsaDER := x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: rsaDER}))
	tests := []struct {
		name string
		iss  config.Issuer
	}{
		{"no issuers", config.Issuer{}},
		{"PKCS #1 RSA PEM", config.Issuer{Name: "r", Issuer: "r", Algorithms: []string{"RS256"}, Keys: []config.Key{{PublicKey: pkcs1}}}},
		{"public_key_file", config.Issuer{Name: "r", Issuer: "r", Algorithms: []string{"RS256"},
			Keys: []config.Key{{PublicKeyFile: writeFile(t, dir, "r.pem", pkcs1)}}}},
		{"jwks skips enc, foreign alg and other curves", config.Issuer{Name: "j", Issuer: "j", Algorithms: []string{"EdDSA"},
			JWKSFile: writeJWKS(t, dir,
				map[string]string{"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"},
				map[string]string{"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"},
				map[string]string{"kty": "OKP", "crv": "X25519", "x": "AA"},
				map[string]string{"kty": "oct", "k": "AA"},
				jwkOf(t, "ed", k.ed.Public()))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Auth{}
			if tc.iss.Name != "" {
				cfg.Issuers = []config.Issuer{tc.iss}
			}
			if _, err := NewVerifier(cfg, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
