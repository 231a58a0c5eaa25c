package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/pricing"
)

const (
	devSecret  = "dev-secret-0123456789abcdef0123456789"
	corpSecret = "corp-secret-0123456789abcdef0123456789"
)

// testConfig has a dev issuer taking its secret from the environment and a
// corp issuer with renamed claims, an audience, a kid and a literal secret.
const testConfig = `
providers:
  - {name: mock, kind: mock}
models:
  - {name: mock-chat, targets: [{provider: mock}]}
auth:
  issuers:
    - name: dev
      issuer: tollgate-dev
      algorithms: [HS256]
      keys: [{secret: "${TOLLGATE_DEV_SECRET}"}]
    - name: corp
      issuer: https://id.example.com
      audience: tollgate
      algorithms: [HS512, HS256]
      keys:
        - {kid: old, secret_file: corp.secret}
        - {kid: new, secret: ` + corpSecret + `}
      claims: {dept: department, models: allowed_models, admin: is_admin}
`

// run1 runs tollctl with args and returns its exit status and output.
func run1(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr, func(k string) string { return env[k] })
	return code, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestToken(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "tollgate.yaml", strings.ReplaceAll(testConfig, "corp.secret", filepath.Join(dir, "corp.secret")))
	writeFile(t, dir, "corp.secret", corpSecret+"-old\n")
	secretFile := writeFile(t, dir, "file.secret", "file-secret-0123456789abcdef012345\r\n")
	env := map[string]string{"TOLLGATE_DEV_SECRET": devSecret, "OTHER_SECRET": "other-secret-0123456789abcdef012345"}

	tests := []struct {
		name    string
		args    []string
		secret  string
		alg     string
		kid     string
		claims  map[string]any // expected claims; nil value means absent
		ttl     time.Duration
		noClaim []string
	}{
		{
			name:   "flags only",
			args:   []string{"--sub", "alice", "--dept", "eng", "--team", "search", "--project", "p1", "--models", "gpt-4o*, mock-*", "--ttl", "2h", "--rpm", "60", "--tpm", "1000", "--admin", "--priority", "batch"},
			secret: devSecret, alg: "HS256", ttl: 2 * time.Hour,
			claims: map[string]any{
				"iss": "dev", "sub": "alice", "dept": "eng", "team": "search", "project": "p1",
				"models": []any{"gpt-4o*", "mock-*"}, "rpm": 60.0, "tpm": 1000.0, "admin": true, "priority": "batch",
			},
			noClaim: []string{"aud"},
		},
		{
			name:   "minimal with defaults",
			args:   []string{"--sub", "bob"},
			secret: devSecret, alg: "HS256", ttl: 24 * time.Hour,
			claims:  map[string]any{"iss": "dev", "sub": "bob"},
			noClaim: []string{"models", "admin", "rpm", "tpm", "dept", "priority"},
		},
		{
			name:   "explicit issuer audience kid jti",
			args:   []string{"--sub", "c", "--issuer", "me", "--aud", "gw", "--kid", "k7", "--jti", "key-1"},
			secret: devSecret, alg: "HS256", kid: "k7", ttl: 24 * time.Hour,
			claims: map[string]any{"iss": "me", "aud": "gw", "jti": "key-1"},
		},
		{
			name:   "secret env",
			args:   []string{"--sub", "d", "--secret-env", "OTHER_SECRET", "--alg", "HS384"},
			secret: env["OTHER_SECRET"], alg: "HS384", ttl: 24 * time.Hour,
			claims: map[string]any{"sub": "d"},
		},
		{
			name:   "secret file",
			args:   []string{"--sub", "e", "--secret-file", secretFile},
			secret: "file-secret-0123456789abcdef012345", alg: "HS256", ttl: 24 * time.Hour,
			claims: map[string]any{"sub": "e"},
		},
		{
			name:   "config dev issuer",
			args:   []string{"--sub", "f", "--config", cfg, "--models", "mock-*"},
			secret: devSecret, alg: "HS256", ttl: 24 * time.Hour,
			claims: map[string]any{"iss": "tollgate-dev", "models": []any{"mock-*"}},
		},
		{
			name:   "config corp issuer renames claims",
			args:   []string{"--sub", "g", "--config", cfg, "--issuer", "corp", "--dept", "fin", "--models", "gpt-*", "--admin"},
			secret: corpSecret + "-old", alg: "HS512", kid: "old", ttl: 24 * time.Hour,
			claims: map[string]any{
				"iss": "https://id.example.com", "aud": "tollgate", "department": "fin",
				"allowed_models": []any{"gpt-*"}, "is_admin": true,
			},
			noClaim: []string{"dept", "models", "admin"},
		},
		{
			name:   "config key chosen by kid",
			args:   []string{"--sub", "h", "--config", cfg, "--issuer", "corp", "--kid", "new"},
			secret: corpSecret, alg: "HS512", kid: "new", ttl: 24 * time.Hour,
			claims: map[string]any{"iss": "https://id.example.com"},
		},
		{
			name:   "flags override config",
			args:   []string{"--sub", "i", "--config", cfg, "--issuer", "corp", "--aud", "other", "--secret-env", "OTHER_SECRET"},
			secret: env["OTHER_SECRET"], alg: "HS512", kid: "old", ttl: 24 * time.Hour,
			claims: map[string]any{"aud": "other"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now().Truncate(time.Second)
			code, stdout, stderr := run1(t, env, append([]string{"token"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			if strings.Count(stdout, "\n") != 1 || strings.Count(stdout, ".") != 2 {
				t.Fatalf("stdout is not one token line: %q", stdout)
			}
			tok, err := jwt.Parse(strings.TrimSpace(stdout), func(*jwt.Token) (any, error) {
				return []byte(tt.secret), nil
			}, jwt.WithValidMethods([]string{tt.alg}), jwt.WithExpirationRequired())
			if err != nil {
				t.Fatalf("parse token: %v", err)
			}
			if kid, _ := tok.Header["kid"].(string); kid != tt.kid {
				t.Errorf("kid = %q, want %q", kid, tt.kid)
			}
			claims := tok.Claims.(jwt.MapClaims)
			for name, want := range tt.claims {
				if got := claims[name]; !equal(got, want) {
					t.Errorf("claim %s = %#v, want %#v", name, got, want)
				}
			}
			for _, name := range tt.noClaim {
				if v, ok := claims[name]; ok {
					t.Errorf("claim %s = %#v, want absent", name, v)
				}
			}
			exp, err := claims.GetExpirationTime()
			if err != nil {
				t.Fatal(err)
			}
			if d := exp.Sub(before); d < tt.ttl || d > tt.ttl+2*time.Second {
				t.Errorf("exp is %s after the start, want %s", d, tt.ttl)
			}
			if jti, _ := claims["jti"].(string); jti == "" {
				t.Error("jti is empty")
			}
		})
	}
}

func equal(got, want any) bool {
	g, ok1 := got.([]any)
	w, ok2 := want.([]any)
	if ok1 && ok2 {
		if len(g) != len(w) {
			return false
		}
		for i := range g {
			if g[i] != w[i] {
				return false
			}
		}
		return true
	}
	return !ok1 && !ok2 && got == want
}

func TestTokenErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "tollgate.yaml", testConfig)
	rsaOnly := writeFile(t, dir, "rsa.yaml", `
auth:
  issuers:
    - {name: corp, issuer: x, algorithms: [RS256], jwks_file: jwks.json}
`)
	env := map[string]string{"TOLLGATE_DEV_SECRET": devSecret}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"no sub", env, []string{}, 2, "--sub is required"},
		{"bad ttl", env, []string{"--sub", "a", "--ttl", "-1h"}, 2, "--ttl must be positive"},
		{"stray argument", env, []string{"--sub", "a", "extra"}, 2, `unexpected argument "extra"`},
		{"unknown flag", env, []string{"--sub", "a", "--nope"}, 2, "unknown flag: --nope"},
		{"no secret", nil, []string{"--sub", "a"}, 1, "TOLLGATE_DEV_SECRET is empty"},
		{"empty named env", env, []string{"--sub", "a", "--secret-env", "MISSING"}, 1, "MISSING is empty"},
		{"short secret", map[string]string{"TOLLGATE_DEV_SECRET": "short"}, []string{"--sub", "a"}, 1, "shorter than 32 bytes"},
		{"missing secret file", env, []string{"--sub", "a", "--secret-file", filepath.Join(dir, "nope")}, 1, "read secret"},
		{"unknown issuer", env, []string{"--sub", "a", "--config", cfg, "--issuer", "x"}, 1, `issuer "x" is not in`},
		{"missing config", env, []string{"--sub", "a", "--config", filepath.Join(dir, "nope.yaml")}, 1, "read config"},
		{"invalid config", nil, []string{"--sub", "a", "--config", cfg}, 1, "auth.issuers[0].keys[0]: no key material"},
		{"no hmac algorithm", env, []string{"--sub", "a", "--config", rsaOnly, "--issuer", "corp"}, 1, "pins no HS256"},
		{"rsa alg flag", env, []string{"--sub", "a", "--alg", "RS256"}, 1, "does not fit RS256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run1(t, tt.env, append([]string{"token"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.want)
			}
		})
	}
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", strings.ReplaceAll(testConfig, "corp.secret", filepath.Join(dir, "corp.secret")))
	writeFile(t, dir, "corp.secret", corpSecret+"\n")
	bad := writeFile(t, dir, "bad.yaml", `
log: {format: xml}
providers:
  - {name: p, kind: opnai}
models:
  - {name: m, targets: [{provider: x}]}
`)
	unknownKey := writeFile(t, dir, "unknown.yaml", "providers: []\nprovidrs: []\n")
	badKeyFile := writeFile(t, dir, "keyfile.yaml", `
auth:
  issuers:
    - {name: dev, issuer: d, algorithms: [RS256], keys: [{public_key_file: `+filepath.Join(dir, "missing.pem")+`}]}
`)
	noIssuers := writeFile(t, dir, "noauth.yaml", "providers: [{name: m, kind: mock}]\n")
	flatTeam := writeFile(t, dir, "flatteam.yaml", "providers: [{name: m, kind: mock}]\n"+
		"budgets: [{scope: team, value: ml, amount_usd: '5', period: day}, {scope: team, value: research/ml, amount_usd: '5', period: day}]\n")
	book := writeFile(t, dir, "book.yaml", "version: \"book-2026-12\"\nprices:\n  m: {input: \"1\", cache_write: \"1.25\"}\n")
	withBook := writeFile(t, dir, "withbook.yaml", "providers: [{name: m, kind: mock}]\nprice_book: "+book+"\n")
	brokenBook := writeFile(t, dir, "broken.yaml", "version: \"b\"\nprices:\n  m: {input: lots}\n")
	withBroken := writeFile(t, dir, "withbroken.yaml", "providers: [{name: m, kind: mock}]\nprice_book: "+brokenBook+"\n")
	withMissing := writeFile(t, dir, "withmissing.yaml", "providers: [{name: m, kind: mock}]\nprice_book: "+filepath.Join(dir, "none.yaml")+"\n")
	env := map[string]string{"TOLLGATE_DEV_SECRET": devSecret}
	embedded := ", prices " + pricing.Default().Version + "\n"

	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		code       int
		wantOut    string
		wantErr    []string
		wantErrLen int // lines on stderr; 0 means do not check
	}{
		{name: "ok", env: env, args: []string{good}, wantOut: "ok: 1 providers, 1 models, 2 issuers" + embedded},
		{name: "ok without issuers", args: []string{noIssuers}, wantOut: "ok: 1 providers, 0 models, 0 issuers" + embedded},
		{name: "price book", args: []string{withBook}, wantOut: "ok: 1 providers, 0 models, 0 issuers, prices book-2026-12\n"},
		{name: "malformed price book", args: []string{withBroken}, code: 1, wantErr: []string{"price_book " + brokenBook + ": parse price table", "line 3"}},
		{name: "missing price book", args: []string{withMissing}, code: 1, wantErr: []string{"price_book: open " + filepath.Join(dir, "none.yaml")}},
		{
			name: "every problem", args: []string{bad}, code: 1, wantErrLen: 3,
			wantErr: []string{
				bad + `: log.format: unknown format "xml"`,
				bad + `: providers[0].kind: unknown kind "opnai" (want openai, azure, anthropic, gemini, bedrock or mock)`,
				bad + `: models[0].targets[0].provider: unknown provider "x"`,
			},
		},
		{name: "team limit without its dept", args: []string{flatTeam}, code: 1, wantErrLen: 1, wantErr: []string{
			flatTeam + `: budgets[0].value: team value "ml" must name its department: write "<dept>/ml" for team ml of one department, "*/ml" for team ml of every department, or "*" for every team`}},
		{name: "unknown key", args: []string{unknownKey}, code: 1, wantErr: []string{"line 2: field providrs not found"}},
		{name: "unset secret", args: []string{good}, code: 1, wantErr: []string{"auth.issuers[0].keys[0]: no key material"}},
		{name: "key file", args: []string{badKeyFile}, code: 1, wantErr: []string{"read public_key_file"}},
		{name: "missing file", args: []string{filepath.Join(dir, "nope.yaml")}, code: 1, wantErr: []string{"read config"}},
		{name: "no file", args: nil, code: 2, wantErr: []string{"want exactly one FILE", "Usage: tollctl config check FILE"}},
		{name: "two files", args: []string{good, good}, code: 2, wantErr: []string{"want exactly one FILE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run1(t, tt.env, append([]string{"config", "check"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if stdout != tt.wantOut {
				t.Errorf("stdout = %q, want %q", stdout, tt.wantOut)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
			if tt.wantErrLen > 0 {
				if n := strings.Count(stderr, "\n"); n != tt.wantErrLen {
					t.Errorf("stderr has %d lines, want %d:\n%s", n, tt.wantErrLen, stderr)
				}
			}
			if tt.code == 0 && stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
		})
	}
}

// rootHelp is what `tollctl help` shows: the commands by group, the
// global flags and the exit status.
var rootHelp = []string{"Tokens and keys:", "Budgets and spend:", "Finance:", "Operations:", "token", "keys revoke ID",
	"config check FILE", "statement verify DIR|FILE...", "reconcile", "completion bash", "--nats URL", "--config FILE", "--json",
	"--clickhouse ADDR", "Exit status:", "tollctl help COMMAND"}

// tokenHelp is what `tollctl token --help` shows.
var tokenHelp = []string{"Usage: tollctl token [flags]", "Examples:", "--sub", "--secret-env", "--secret-file FILE", "--models",
	"--kid", "--aud", "--ttl", "--rpm", "--tpm", "--admin", "--issuer", "Global flags:", "--config FILE"}

func TestUsage(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		noStdout bool
		noStderr bool
	}{
		{name: "help", args: []string{"help"}, stdout: rootHelp, noStderr: true},
		{name: "dash h", args: []string{"-h"}, stdout: rootHelp, noStderr: true},
		{name: "dash dash help", args: []string{"--help"}, stdout: rootHelp, noStderr: true},
		{name: "go-style help", args: []string{"-help"}, stdout: rootHelp, noStderr: true},
		{name: "no arguments", args: nil, code: 2, stderr: rootHelp, noStdout: true},
		{name: "unknown command", args: []string{"bogus"}, code: 2, stderr: []string{`unknown command "bogus"`, "Usage: tollctl COMMAND"}, noStdout: true},
		{name: "misspelt command", args: []string{"tokn"}, code: 2, stderr: []string{`unknown command "tokn" (did you mean token?)`}, noStdout: true},
		{name: "unknown subcommand", args: []string{"config", "lint"}, code: 2, stderr: []string{`unknown command "config lint" (want config check)`}, noStdout: true},
		{name: "group alone", args: []string{"config"}, code: 2, stderr: []string{`unknown command "config" (want config check)`}, noStdout: true},
		{name: "command help", args: []string{"token", "-h"}, stdout: tokenHelp, noStderr: true},
		{name: "help command", args: []string{"help", "token"}, stdout: tokenHelp, noStderr: true},
		{name: "help of a subcommand", args: []string{"help", "keys", "revoke"}, stdout: []string{"Usage: tollctl keys revoke ID [flags]", "Examples:",
			"--actor", "Global flags:", "--nats URL", "--config FILE", "env TOLLGATE_NATS_URL"}, noStderr: true},
		{name: "help of a group", args: []string{"keys", "--help"}, stdout: []string{"Usage: tollctl keys COMMAND", "keys create", "keys revoke ID"}, noStderr: true},
		{name: "help of no command", args: []string{"help", "keys", "bogus"}, code: 2, stderr: []string{`no command "keys bogus"`}, noStdout: true},
		{name: "global flag a command does not read", args: []string{"token", "--sub", "a", "--json"}, code: 2, stderr: []string{"unknown flag: --json"}, noStdout: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run1(t, nil, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout does not contain %q:\n%s", w, stdout)
				}
			}
			for _, w := range tt.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			if tt.noStdout && stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if tt.noStderr && stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
		})
	}
}

// TestTokenVerifies checks that a token minted from a config passes the
// gateway's verifier built from the same config.
func TestTokenVerifies(t *testing.T) {
	dir := t.TempDir()
	cfgFile := writeFile(t, dir, "tollgate.yaml", strings.ReplaceAll(testConfig, "corp.secret", filepath.Join(dir, "corp.secret")))
	writeFile(t, dir, "corp.secret", corpSecret+"\n")
	env := map[string]string{"TOLLGATE_DEV_SECRET": devSecret}
	a := &app{getenv: func(k string) string { return env[k] }}
	cfg, err := a.loadConfig(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(cfg.Auth, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		issuer string
		kid    string
	}{
		{"dev", "dev", ""},
		{"corp first key", "corp", ""},
		{"corp second key", "corp", "new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"token", "--config", cfgFile, "--issuer", tt.issuer, "--sub", "alice",
				"--dept", "eng", "--models", "mock-*", "--rpm", "5", "--admin"}
			if tt.kid != "" {
				args = append(args, "--kid", tt.kid)
			}
			code, stdout, stderr := run1(t, env, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			p, err := v.Verify([]byte(strings.TrimSpace(stdout)))
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			if p.Issuer != tt.issuer || p.Subject != "alice" || p.Dept != "eng" || p.RPM != 5 || !p.Admin ||
				len(p.Models) != 1 || p.Models[0] != "mock-*" {
				t.Errorf("principal = %+v", p)
			}
		})
	}
}
