package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

// TestReadmeDockerToken runs the token command docs/deployment.md gives for the
// Docker setup and verifies its token as the compose gateway does, with
// the image's config (deploy/docker/tollgate.yaml): with the default dev
// secret and with TOLLGATE_DEV_SECRET set on both sides.
func TestReadmeDockerToken(t *testing.T) {
	readme, err := os.ReadFile("../../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "With Docker:")
	if !ok {
		t.Fatal("docs/deployment.md has no \"With Docker:\" section")
	}
	m := regexp.MustCompile("`go run \\./services/tollctl (token [^`]+)`").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("docs/deployment.md's Docker section gives no `go run ./services/tollctl token ...` command")
	}
	args := strings.Fields(m[1])
	for i, a := range args {
		if strings.HasPrefix(a, "deploy/") {
			args[i] = "../../" + a // the page's commands run from the repository root
		}
	}
	cfgData, err := os.ReadFile("../../deploy/docker/tollgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"default secret", map[string]string{}},
		{"TOLLGATE_DEV_SECRET", map[string]string{"TOLLGATE_DEV_SECRET": "s3cret-s3cret-s3cret-s3cret-s3cret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse(cfgData, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			v, err := auth.NewVerifier(cfg.Auth, nil)
			if err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := run1(t, tc.env, args...)
			if code != 0 {
				t.Fatalf("tollctl %s: exit %d: %s", m[1], code, stderr)
			}
			p, err := v.Verify([]byte(strings.TrimSpace(stdout)))
			if err != nil {
				t.Fatalf("the compose gateway refuses the page's token: %v", err)
			}
			if p.Subject != "me" || p.Dept != "eng" {
				t.Errorf("principal %+v, want sub me, dept eng", p)
			}
		})
	}
}
