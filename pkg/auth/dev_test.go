package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

func TestDevToken(t *testing.T) {
	const issuers = `
auth:
  issuers:
    - name: NAME
      issuer: tollgate-dev
      audience: tollgate
      algorithms: [HS256]
      keys:
        - {kid: dev-1, secret: dev-secret-dev-secret-dev-secret-dev}
`
	tests := []struct {
		name, issuer string
		want         bool
	}{
		{"dev issuer with a secret", "dev", true},
		{"no dev issuer", "corp", false},
	}
	now := time.Now()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(strings.Replace(issuers, "NAME", tt.issuer, 1)), nil)
			if err != nil {
				t.Fatal(err)
			}
			tok := DevToken(cfg.Auth, now)
			if (tok != "") != tt.want {
				t.Fatalf("token %q, want one: %v", tok, tt.want)
			}
			if tok == "" {
				return
			}
			v, err := NewVerifier(cfg.Auth, func() time.Time { return now.Add(23 * time.Hour) })
			if err != nil {
				t.Fatal(err)
			}
			p, err := v.Verify([]byte(tok))
			if err != nil {
				t.Fatal(err)
			}
			if p.Subject != "dev-user" || p.Dept != "dev" || p.Team != "dev" || p.Project != "playground" {
				t.Errorf("principal %+v", p)
			}
		})
	}
	if tok := DevToken(config.Auth{}, now); tok != "" {
		t.Errorf("no issuers: token %q", tok)
	}
}
