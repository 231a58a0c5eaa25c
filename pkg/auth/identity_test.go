package auth

import (
	"testing"

	"github.com/tollgate/tollgate/pkg/config"
)

// TestIdentity maps ID token claims as a bearer token's are mapped: the
// issuer's claim names, then its mappings, then its defaults.
func TestIdentity(t *testing.T) {
	is := config.Issuer{Name: "corp", Claims: config.ClaimNames{Dept: "/org/dept"}.WithDefaults(),
		ClaimMappings: []config.ClaimMapping{{Claim: "groups", Value: "research-staff", Dept: "research", Team: "ml"}},
		ClaimDefaults: config.ClaimDefaults{Team: "general"}}
	tests := []struct {
		name, payload   string
		sub, dept, team string
		wantErr         bool
	}{
		{"dept claim", `{"sub":"a","org":{"dept":"eng"}}`, "a", "eng", "general", false},
		{"mapping", `{"sub":"b","groups":["staff","research-staff"]}`, "b", "research", "ml", false},
		{"nothing", `{"sub":"c"}`, "c", NoDept, "general", false},
		{"dept of the wrong type", `{"sub":"d","org":{"dept":7}}`, "", "", "", true},
		{"not an object", `[1]`, "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Identity(is, []byte(tt.payload))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if p.Subject != tt.sub || p.Dept != tt.dept || p.Team != tt.team || p.Issuer != "corp" {
				t.Errorf("principal %+v, want sub %s dept %s team %s", p, tt.sub, tt.dept, tt.team)
			}
		})
	}
}

func TestHasClaim(t *testing.T) {
	payload := []byte(`{"groups":["a","b"],"role":"finance","realm_access":{"roles":["key-admin"]},"n":3}`)
	tests := []struct {
		path, value string
		want        bool
	}{
		{"groups", "b", true},
		{"groups", "c", false},
		{"role", "finance", true},
		{"role", "fin", false},
		{"/realm_access/roles", "key-admin", true},
		{"/realm_access/missing", "key-admin", false},
		{"n", "3", false},
		{"absent", "x", false},
	}
	for _, tt := range tests {
		t.Run(tt.path+"="+tt.value, func(t *testing.T) {
			got, err := HasClaim(payload, tt.path, tt.value)
			if err != nil || got != tt.want {
				t.Errorf("HasClaim = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if _, err := HasClaim(payload, "/bad~2", "x"); err == nil {
		t.Error("a malformed path is not an error")
	}
}
