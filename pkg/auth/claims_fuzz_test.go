package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/pkg/config"
)

// FuzzClaims signs arbitrary header and payload JSON with the issuer's real
// key, so the fuzzer reaches the claim decoding behind the signature check
// (random tokens almost never get past it). A token is accepted only with a
// JSON object payload naming the issuer, the audience and an exp still
// valid, and its principal holds what the payload says.
func FuzzClaims(f *testing.F) {
	k := genTestKeys()
	v := newTestVerifier(f, testAuth(f), func() time.Time { return testNow })
	exp := testNow.Add(time.Hour).Unix()
	seeds := [][2]string{
		{`{"alg":"HS256","typ":"JWT"}`, payload("https://hs.test", `"aud":"tollgate"`)},
		{`{"alg":"HS256"}`, payload("https://hs.test", `"aud":["x","tollgate"]`, `"models":["gpt-*"]`, `"admin":true`, `"rpm":5`)},
		{`{"alg":"HS256"}`, payload("https://hs.test", `"aud":"tollgate"`, `"budgets":[{"scope":"team","value":"*","amount_usd":1.5,"period":"day"}]`)},
		{`{"alg":"HS256"}`, payload("https://hs.test", `"aud":"tollgate"`, `"models":"gpt-*"`, `"rpm":-1`, `"tpm":1e300`)},
		{`{"alg":"HS256"}`, `{"iss":"https://hs.test","aud":"tollgate","exp":"` + time.Unix(exp, 0).Format(time.RFC3339) + `"}`},
		{`{"alg":"HS256","kid":"../../etc/passwd"}`, payload("https://hs.test", `"aud":"tollgate"`, `"nbf":1e20`)},
		{`{"alg":"HS256","crit":["exp"]}`, `{"iss":"https://hs.test","aud":"tollgate","exp":1e400}`},
		{`{"alg":"none"}`, `[]`},
		{`{}`, `{"iss":"https://hs.test","iss":"https://rs.test"}`},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, header, claims []byte) {
		tok := rawToken(t, string(header), string(claims), jwt.SigningMethodHS256, k.secret2)
		p, err := v.Verify([]byte(tok))
		if err != nil {
			if p != nil || !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("Verify = %v, %v", p, err)
			}
			return
		}
		var m map[string]any
		if err := json.Unmarshal(claims, &m); err != nil {
			t.Fatalf("accepted a payload encoding/json refuses (%v): %s", err, claims)
		}
		if m["iss"] != "https://hs.test" || p.Issuer != "hs" {
			t.Fatalf("accepted iss %v as issuer %q", m["iss"], p.Issuer)
		}
		if !testNow.Before(p.ExpiresAt.Add(DefaultLeeway)) {
			t.Fatalf("accepted exp %v at %v", p.ExpiresAt, testNow)
		}
		if sub, ok := m["sub"].(string); ok && sub != p.Subject {
			t.Fatalf("subject %q, payload says %q", p.Subject, sub)
		}
		if p.Admin != (m["admin"] == true) {
			t.Fatalf("admin %v for claim %v", p.Admin, m["admin"])
		}
		if p.RPM < 0 || p.TPM < 0 {
			t.Fatalf("negative limits rpm %d tpm %d", p.RPM, p.TPM)
		}
	})
}

// FuzzJWKS loads arbitrary JSON Web Key Sets: a set is refused with an
// error or gives keys, never a panic.
func FuzzJWKS(f *testing.F) {
	for _, s := range []string{
		`{"keys":[]}`,
		`{"keys":[{"kty":"RSA","kid":"a","n":"sXch","e":"AQAB"}]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"}]}`,
		`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
		`{"keys":[{"kty":"RSA","use":"enc","n":"","e":""},{"kty":"oct","k":"c2VjcmV0"}]}`,
		`{"keys":[{"kty":"RSA","alg":"RS256","n":"AQ","e":"AQAB"}]}`,
		`{"keys":{}}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, set []byte) {
		file := filepath.Join(dir, "jwks.json")
		if err := os.WriteFile(file, set, 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := loadJWKS(file, algSet(1<<algRS256|1<<algES256|1<<algEdDSA))
		if err != nil && keys != nil {
			t.Fatalf("keys returned with error %v", err)
		}
		_, _ = NewVerifier(config.Auth{Issuers: []config.Issuer{{Name: "j", Issuer: "j", Algorithms: []string{"RS256", "ES256", "EdDSA"}, JWKSFile: file}}}, nil)
	})
}

// FuzzClaimPath walks arbitrary claim paths through arbitrary payloads and
// checks the result against a walk of the payload as encoding/json decodes
// it into maps, and that matching a mapping value never panics.
func FuzzClaimPath(f *testing.F) {
	for _, s := range [][2]string{
		{"/realm_access/roles", `{"realm_access":{"roles":["a","b"]}}`},
		{"https://corp.example/dept", `{"https://corp.example/dept":"eng"}`},
		{"/https:~1~1corp.example~1org/team", `{"https://corp.example/org":{"team":"ml"}}`},
		{"/a~0b/c", `{"a~b":{"c":1}}`},
		{"/", `{"":"x"}`},
		{"/a/b", `{"a":{"b":1},"a":"dup"}`},
		{"/a~", `{}`},
		{"groups", `{"groups":["eng-ml",1,null]}`},
		{"/n", `{"n":1` + strings.Repeat("4", 400) + `}`},
	} {
		f.Add(s[0], []byte(s[1]), "eng-ml")
	}
	f.Fuzz(func(t *testing.T, path string, payload []byte, value string) {
		p, err := parseClaimPath(path)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(payload, &m) != nil {
			return
		}
		raw, ok := p.get(m)
		// Numbers stay json.Number: a claim may hold a number no float64
		// can, and the path walk must not care.
		ref, err := decodeNumbers(payload)
		if err != nil {
			t.Fatalf("encoding/json refuses a payload decoded to a map: %v", err)
		}
		refOK := true
		for _, seg := range p.segs {
			obj, isObj := ref.(map[string]any)
			if !isObj {
				refOK = false
				break
			}
			if ref, refOK = obj[seg]; !refOK {
				break
			}
		}
		if ok != refOK {
			t.Fatalf("path %q found %v, encoding/json walk %v", path, ok, refOK)
		}
		if !ok {
			return
		}
		got, err := decodeNumbers(raw)
		if err != nil {
			t.Fatalf("value %s does not decode: %v", raw, err)
		}
		if !reflect.DeepEqual(got, ref) {
			t.Fatalf("path %q = %v, encoding/json walk %v", path, got, ref)
		}
		want := ref == value
		if arr, isArr := ref.([]any); isArr {
			want = slices.Contains(arr, any(value))
		}
		if claimHas(raw, value) != want {
			t.Fatalf("claimHas(%s, %q) = %v", raw, value, !want)
		}
	})
}

// decodeNumbers decodes one JSON value with numbers kept as json.Number.
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
