package auth

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/pkg/config"
)

// TestIdPTokens maps golden tokens shaped like those of Entra ID, Okta,
// Keycloak, Auth0 and Google (testdata/tokens) to principals, with the
// issuer configs of the "Identity providers" examples of docs/identity.md, read from
// that page itself (readmeIssuers) so the two cannot drift apart. The
// files' iat, nbf and exp are moved to testNow so they stay valid.
func TestIdPTokens(t *testing.T) {
	k := genTestKeys()
	pem := pubPEM(t, &k.rsa.PublicKey)
	exp := func(d time.Duration) time.Time { return testNow.Add(d).Truncate(time.Second) }
	issuers := readmeIssuers(t, map[string]string{
		"<tenant-id>":       "9188040d-6c67-4c5b-b112-36a304b66dad",
		"<group-object-id>": "7f8e9d0c-0000-4000-8000-0000000000ml",
		"<org>":             "dev-123456",
		"<tenant>":          "corp",
		"<client-id>":       "1234567890-abc123def456",
	})
	tests := []struct {
		file, issuer string
		want         Principal
	}{
		// A group maps dept and team; the project is the default.
		{"entra.json", "entra", Principal{Subject: "2d4f1c3e-7b8a-4e2f-9c1d-5a6b7c8d9e0f", KeyID: "rTjV9JrIBkmPhrFgtQ1xAA",
			Dept: "research", Team: "ml", Project: "shared", NotBefore: testNow, ExpiresAt: exp(time.Hour)}},
		// Two groups match: each field comes from the first rule, in table
		// order, that sets it.
		{"okta.json", "okta", Principal{Subject: "ada@example.com", KeyID: "AT.Xf3kLmN0pQrStUvWxYz1234567890abcdefg",
			Dept: "research", Team: "ml", Project: "shared", ExpiresAt: exp(time.Hour)}},
		{"keycloak.json", "keycloak", Principal{Subject: "f1b3a6d2-4c5e-4f70-9a8b-1c2d3e4f5a6b", KeyID: "onrtac:3f1e6c1a-2b3c-4d5e-8f90-a1b2c3d4e5f6",
			Dept: "finance", Team: "analytics", Project: "forecast", ExpiresAt: exp(time.Hour)}},
		{"auth0.json", "auth0", Principal{Subject: "auth0|64f1a2b3c4d5e6f708192a3b", Dept: "sales", Team: "emea", Project: "crm",
			Models: []string{"gpt-4o*", "claude-*"}, ExpiresAt: exp(24 * time.Hour)}},
		{"google.json", "google", Principal{Subject: "ada@corp.example", Dept: "corp", Team: "general", ExpiresAt: exp(time.Hour)}},
	}
	if len(issuers) != len(tests) {
		t.Errorf("docs/identity.md shows %d issuer examples, the test maps %d", len(issuers), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "tokens", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var claims map[string]any
			if err := json.Unmarshal(b, &claims); err != nil {
				t.Fatal(err)
			}
			iat := claims["iat"].(float64)
			for _, c := range []string{"iat", "nbf", "exp"} {
				if v, ok := claims[c].(float64); ok {
					claims[c] = float64(testNow.Unix()) + v - iat
				}
			}
			body, err := json.Marshal(claims)
			if err != nil {
				t.Fatal(err)
			}
			is, ok := issuers[tt.issuer]
			if !ok {
				t.Fatalf("docs/identity.md shows no issuer %q", tt.issuer)
			}
			// The page's issuers fetch their keys by discovery; here the
			// token's own issuer and a static key stand in for it.
			is.Name, is.DiscoveryURL, is.Keys = "idp", "", []config.Key{{KID: "k1", PublicKey: pem}}
			if is.Issuer == "" {
				is.Issuer = claims["iss"].(string)
			}
			v := newTestVerifier(t, config.Auth{Issuers: []config.Issuer{is}, CacheSize: -1}, func() time.Time { return testNow })
			tok := rawToken(t, `{"alg":"RS256","typ":"JWT","kid":"k1"}`, string(body), jwt.SigningMethodRS256, k.rsa)
			p, err := v.Verify([]byte(tok))
			if err != nil {
				t.Fatal(err)
			}
			want, got := tt.want, *p
			want.Issuer = "idp"
			if !got.ExpiresAt.Equal(want.ExpiresAt) || !got.NotBefore.Equal(want.NotBefore) {
				t.Errorf("exp %v nbf %v, want %v and %v", got.ExpiresAt, got.NotBefore, want.ExpiresAt, want.NotBefore)
			}
			got.ExpiresAt, got.NotBefore, want.ExpiresAt, want.NotBefore = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("principal\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestClaimPaths covers the path syntax on its own.
func TestClaimPaths(t *testing.T) {
	payload := `{"a":{"b":{"c":"deep"},"x/y":"slash","t~":"tilde"},"a.b":"dotted","https://c.example/d":"url","n":null,"s":"str","":"empty"}`
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(payload), &m); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path, want string
		ok         bool
	}{
		{"a.b", `"dotted"`, true},
		{"https://c.example/d", `"url"`, true},
		{"/a/b/c", `"deep"`, true},
		{"/a/x~1y", `"slash"`, true},
		{"/a/t~0", `"tilde"`, true},
		{"/a/b/c/d", "", false},
		{"/s/x", "", false},
		{"/n/x", "", false},
		{"/missing", "", false},
		{"/", `"empty"`, true},
	} {
		p, err := parseClaimPath(tt.path)
		if err != nil {
			t.Fatalf("%q: %v", tt.path, err)
		}
		got, ok := p.get(m)
		if ok != tt.ok || string(got) != tt.want {
			t.Errorf("%q = %s, %v; want %s, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
	for _, bad := range []string{"", "/a~", "/a~2"} {
		if _, err := parseClaimPath(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// readmeIssuers returns the issuers of docs/identity.md's identity provider
// examples (the yaml blocks of "Identity providers", from "**Mappings.**"
// to the next section), by name, with each placeholder replaced by its
// value in vals.
func readmeIssuers(t *testing.T, vals map[string]string) map[string]config.Issuer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "identity.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "**Mappings.**")
	if start < 0 {
		t.Fatal("docs/identity.md: no **Mappings.** paragraph")
	}
	text = text[start:]
	if end := strings.Index(text, "\n### "); end >= 0 {
		text = text[:end]
	}
	out := map[string]config.Issuer{}
	for _, block := range strings.Split(text, "```yaml\n")[1:] {
		block = block[:strings.Index(block, "```")]
		i := strings.Index(block, "- name:")
		if i < 0 {
			t.Fatalf("docs/identity.md: an example without an issuer: %s", block)
		}
		indent := i - strings.LastIndexByte(block[:i], '\n') - 1
		var lines []string
		for _, l := range strings.Split(block[i-indent:], "\n") {
			lines = append(lines, l[min(indent, len(l)-len(strings.TrimLeft(l, " "))):])
		}
		item := strings.Join(lines, "\n")
		for k, v := range vals {
			item = strings.ReplaceAll(item, k, v)
		}
		if strings.Contains(item, "<") {
			t.Fatalf("docs/identity.md: a placeholder the test gives no value for: %s", item)
		}
		var iss []config.Issuer
		if err := yaml.Unmarshal([]byte(item), &iss); err != nil || len(iss) != 1 {
			t.Fatalf("docs/identity.md example %s: %v", item, err)
		}
		out[iss[0].Name] = iss[0]
	}
	return out
}
