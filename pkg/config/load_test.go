package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// minimal is a small valid config used as a base by several tests.
const minimal = `
providers:
  - name: openai
    kind: openai
    base_url: https://api.openai.com/v1
    api_key: ${OPENAI_API_KEY}
  - name: mock
    kind: mock
models:
  - name: gpt-4o
    targets:
      - provider: openai
  - name: mock-chat
    type: chat
    targets: [{provider: mock, model: mock-1}]
auth:
  issuers:
    - name: dev
      issuer: tollgate-dev
      algorithms: [HS256]
      keys:
        - secret: ${TOLLGATE_DEV_SECRET:-dev-secret-for-tests-only-0123456789}
`

// env returns a getenv backed by a map.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestExpandEnv(t *testing.T) {
	vars := env(map[string]string{"A": "alpha", "EMPTY": "", "B_2": "two"})
	tests := []struct {
		name, in, want string
	}{
		{"no references", "a: b\n", "a: b\n"},
		{"plain", "x: ${A}", "x: alpha"},
		{"twice in one value", "x: ${A}-${B_2}", "x: alpha-two"},
		{"unset is empty", "x: '${NOPE}'", "x: ''"},
		{"default when unset", "x: ${NOPE:-fallback}", "x: fallback"},
		{"default when empty", "x: ${EMPTY:-fallback}", "x: fallback"},
		{"default ignored when set", "x: ${A:-fallback}", "x: alpha"},
		{"empty default", "x: '${NOPE:-}'", "x: ''"},
		{"default with colon and slash", "x: ${NOPE:-http://h:1/v1}", "x: http://h:1/v1"},
		{"dollar escape", "x: $${A}", "x: ${A}"},
		{"double escape", "x: $$$$", "x: $$"},
		{"lone dollar kept", "x: a$b $ c$", "x: a$b $ c$"},
		{"dollar without braces kept", "x: $A", "x: $A"},
		{"in a comment too", "# ${A}\nx: 1", "# alpha\nx: 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := expandEnv([]byte(tt.in), vars)
			if err != nil {
				t.Fatalf("expandEnv(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("expandEnv(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestExpandEnvErrors(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"unterminated", "a: 1\nx: ${A", []string{"line 2: unterminated ${"}},
		{"unterminated at line end", "x: ${A\ny: }", []string{"line 1: unterminated ${"}},
		{"empty name", "a: 1\nb: 2\nx: ${}", []string{"line 3: bad variable name in ${}"}},
		{"name starts with digit", "x: ${1A}", []string{"line 1: bad variable name in ${1A}"}},
		{"space in name", "x: ${A B}", []string{"line 1: bad variable name in ${A B}"}},
		{"all reported", "x: ${-}\ny: ${Z", []string{"line 1: bad variable name", "line 2: unterminated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := expandEnv([]byte(tt.in), env(nil))
			if err == nil {
				t.Fatalf("expandEnv(%q): no error", tt.in)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", c.Listen, "127.0.0.1:8080"},
		{"body_limit", c.BodyLimit, 8 << 20},
		{"shutdown_grace", c.ShutdownGrace, 30 * time.Second},
		{"read_timeout", c.ReadTimeout, 30 * time.Second},
		{"idle_timeout", c.IdleTimeout, 120 * time.Second},
		{"write_timeout", c.WriteTimeout, 30 * time.Second},
		{"max_header_bytes", c.MaxHeaderBytes, 8 << 10},
		{"log.format", c.Log.Format, "json"},
		{"log.level", c.Log.Level, "info"},
		{"log.requests", c.Log.Requests, false},
		{"auth.cache_size", c.Auth.CacheSize, 65536},
		{"issuer leeway", c.Auth.Issuers[0].Leeway, 30 * time.Second},
		{"claims", c.Auth.Issuers[0].Claims, ClaimNames{
			Subject: "sub", KeyID: "jti", Dept: "dept", Team: "team", Project: "project",
			Models: "models", Budgets: "budgets", RPM: "rpm", TPM: "tpm", Admin: "admin", Priority: "priority",
		}},
		{"issuer secret default", c.Auth.Issuers[0].Keys[0].Secret, "dev-secret-for-tests-only-0123456789"},
		{"timeouts", c.Providers[0].Timeouts, Timeouts{
			Connect: 5 * time.Second, FirstByte: 60 * time.Second, Idle: 60 * time.Second, Total: 10 * time.Minute,
		}},
		{"max_conns", c.Providers[1].MaxConns, 4096},
		{"max_idle_conn_duration", c.Providers[0].MaxIdleConnDuration, 30 * time.Second},
		{"max_response_body", c.Providers[0].MaxResponseBody, 64 << 20},
		{"model type", c.Models[0].Type, "chat"},
		{"target model defaults to model name", c.Models[0].Targets[0].Model, "gpt-4o"},
		{"target model kept", c.Models[1].Targets[0].Model, "mock-1"},
		{"nats.replicas", c.NATS.Replicas, 1},
		{"nats.max_age", c.NATS.MaxAge, 400 * 24 * time.Hour},
		{"nats.duplicate_window", c.NATS.DuplicateWindow, 2 * time.Minute},
		{"usage.spool_dir", c.Usage.SpoolDir, "./data/spool"},
		{"usage.buffer", c.Usage.Buffer, 65536},
		{"usage.batch_size", c.Usage.BatchSize, 256},
		{"usage.batch_bytes", c.Usage.BatchBytes, 256 << 10},
		{"usage.spool_max_bytes", c.Usage.SpoolMaxBytes, int64(1 << 30)},
		{"usage.sync_interval", c.Usage.SyncInterval, 100 * time.Millisecond},
		{"usage.unpriced_model", c.Usage.UnpricedModel, "zero"},
		{"usage.compression", c.Usage.Compression, "s2"},
		{"budget_overcommit", c.BudgetOvercommit, false},
		{"budget.leases on by default", c.Budget.Leases.Disabled, false},
		{"rate limits divided across gateways by default", c.RateLimit.Local, false},
		{"rate_limit.presence_ttl (ratelimit.DefaultPresenceTTL applies)", c.RateLimit.PresenceTTL, time.Duration(0)},
	}
	for _, ck := range checks {
		t.Run(ck.name, func(t *testing.T) {
			if !reflect.DeepEqual(ck.got, ck.want) {
				t.Errorf("got %#v, want %#v", ck.got, ck.want)
			}
		})
	}
}

func TestParseKeepsExplicitValues(t *testing.T) {
	src := `
listen: 0.0.0.0:9000
body_limit: 1024
shutdown_grace: 5s
log: {format: text, level: debug, requests: true}
auth:
  cache_size: -1
  issuers:
    - name: corp
      issuer: https://id.example.com
      audience: tollgate
      algorithms: [RS256, ES256]
      leeway: 2s
      jwks_file: /etc/tollgate/jwks.json
      claims: {dept: department, models: allowed_models}
    - name: entra
      discovery_url: https://login.microsoftonline.com/t1/v2.0/.well-known/openid-configuration
      algorithms: [RS256]
      jwks_refresh_max: 10m
      claims: {team: /realm_access/team}
      claim_mappings:
        - {claim: groups, value: eng-ml, dept: research, team: ml}
      claim_defaults: {dept: unassigned}
providers:
  - name: p
    kind: mock
    timeouts: {connect: 1s, total: 30s}
    max_conns: 10
models:
  - {name: e, type: embeddings, targets: [{provider: p}]}
budgets:
  - {scope: dept, value: "*", amount_usd: "250", period: month}
  - {scope: global, amount_usd: "1000.5", period: total}
rate_limits:
  - {scope: team, value: search, rpm: 600, tpm: 100000}
rate_limit: {local: true, presence_ttl: 5s}
nats:
  url: nats://a:4222,nats://b:4222
  replicas: 3
  max_age: 720h
usage:
  buffer: 100
  unpriced_model: refuse
  fail_closed: true
  compression: none
prices:
  my-model: {input: "0.15", output: "0.6"}
`
	c, err := Parse([]byte(src), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	is := c.Auth.Issuers[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", c.Listen, "0.0.0.0:9000"},
		{"body_limit", c.BodyLimit, 1024},
		{"shutdown_grace", c.ShutdownGrace, 5 * time.Second},
		{"log", c.Log, Log{Format: "text", Level: "debug", Requests: true}},
		{"cache disabled", c.Auth.CacheSize, -1},
		{"leeway", is.Leeway, 2 * time.Second},
		{"renamed claim", is.Claims.Dept, "department"},
		{"renamed models claim", is.Claims.Models, "allowed_models"},
		{"other claim default", is.Claims.Team, "team"},
		{"no refresh without fetching", is.JWKSRefreshMin, time.Duration(0)},
		{"issuer from discovery", c.Auth.Issuers[1].Issuer, "https://login.microsoftonline.com/t1/v2.0"},
		{"refresh min default", c.Auth.Issuers[1].JWKSRefreshMin, time.Minute},
		{"refresh max", c.Auth.Issuers[1].JWKSRefreshMax, 10 * time.Minute},
		{"claim path", c.Auth.Issuers[1].Claims.Team, "/realm_access/team"},
		{"mapping", c.Auth.Issuers[1].ClaimMappings, []ClaimMapping{{Claim: "groups", Value: "eng-ml", Dept: "research", Team: "ml"}}},
		{"claim defaults", c.Auth.Issuers[1].ClaimDefaults, ClaimDefaults{Dept: "unassigned"}},
		{"connect", c.Providers[0].Timeouts.Connect, time.Second},
		{"first_byte default", c.Providers[0].Timeouts.FirstByte, 60 * time.Second},
		{"total", c.Providers[0].Timeouts.Total, 30 * time.Second},
		{"max_conns", c.Providers[0].MaxConns, 10},
		{"model type", c.Models[0].Type, "embeddings"},
		{"budget", c.Budgets[0], BudgetLimit{Scope: "dept", Value: "*", AmountUSD: "250", Period: "month"}},
		{"rate limit", c.RateLimits[0], RateLimit{Scope: "team", Value: "search", RPM: 600, TPM: 100000}},
		{"rate limits local", c.RateLimit, RateLimiting{Local: true, PresenceTTL: 5 * time.Second}},
		{"replicas", c.NATS.Replicas, 3},
		{"max_age", c.NATS.MaxAge, 720 * time.Hour},
		{"usage buffer", c.Usage.Buffer, 100},
		{"unpriced", c.Usage.UnpricedModel, "refuse"},
		{"compression", c.Usage.Compression, "none"},
		{"fail closed", c.Usage.FailClosed, true},
		{"price", c.Prices["my-model"], Price{Input: "0.15", Output: "0.6"}},
	}
	for _, ck := range checks {
		t.Run(ck.name, func(t *testing.T) {
			if !reflect.DeepEqual(ck.got, ck.want) {
				t.Errorf("got %#v, want %#v", ck.got, ck.want)
			}
		})
	}
}

func TestParseEnvironment(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		env   map[string]string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "api key expanded",
			src:  minimal,
			env:  map[string]string{"OPENAI_API_KEY": "sk-test"},
			check: func(t *testing.T, c *Config) {
				if got := c.Provider("openai").APIKey; got != "sk-test" {
					t.Errorf("api_key = %q, want sk-test", got)
				}
			},
		},
		{
			name: "unset api key is legal and empty",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				if got := c.Provider("openai").APIKey; got != "" {
					t.Errorf("api_key = %q, want empty", got)
				}
			},
		},
		{
			name: "listen override",
			src:  "listen: 127.0.0.1:1\n" + minimal,
			env:  map[string]string{"TOLLGATE_LISTEN": ":9999"},
			check: func(t *testing.T, c *Config) {
				if c.Listen != ":9999" {
					t.Errorf("listen = %q, want :9999", c.Listen)
				}
			},
		},
		{
			name: "listen override over default",
			src:  minimal,
			env:  map[string]string{"TOLLGATE_LISTEN": "0.0.0.0:80"},
			check: func(t *testing.T, c *Config) {
				if c.Listen != "0.0.0.0:80" {
					t.Errorf("listen = %q, want 0.0.0.0:80", c.Listen)
				}
			},
		},
		{
			name: "empty listen override ignored",
			src:  "listen: 127.0.0.1:1\n" + minimal,
			check: func(t *testing.T, c *Config) {
				if c.Listen != "127.0.0.1:1" {
					t.Errorf("listen = %q, want 127.0.0.1:1", c.Listen)
				}
			},
		},
		{
			name: "expanded number and duration",
			src:  "body_limit: ${LIMIT}\nread_timeout: ${RT:-7s}\n" + minimal,
			env:  map[string]string{"LIMIT": "4096"},
			check: func(t *testing.T, c *Config) {
				if c.BodyLimit != 4096 || c.ReadTimeout != 7*time.Second {
					t.Errorf("body_limit %d read_timeout %s, want 4096 7s", c.BodyLimit, c.ReadTimeout)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.src), env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestAPIKeyEnv(t *testing.T) {
	tests := []struct {
		name, apiKey, want string
	}{
		{"sole reference", "${OPENAI_API_KEY}", "OPENAI_API_KEY"},
		{"quoted", `"${OPENAI_API_KEY}"`, "OPENAI_API_KEY"},
		{"with default", "${GROQ_KEY:-}", "GROQ_KEY"},
		{"literal key", "sk-literal", ""},
		{"prefix text", "Bearer-${K}", ""},
		{"two references", "${A}${B}", ""},
		{"escaped", "$${K}", ""},
		{"absent", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "providers:\n  - {name: m, kind: mock}\n  - name: o\n    kind: openai\n    base_url: http://127.0.0.1:1/v1\n"
			if tt.apiKey != "" {
				src += "    api_key: " + tt.apiKey + "\n"
			}
			c, err := Parse([]byte(src), env(map[string]string{"OPENAI_API_KEY": "sk-1"}))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Providers[1].APIKeyEnv; got != tt.want {
				t.Errorf("APIKeyEnv = %q, want %q", got, tt.want)
			}
			if got := c.Providers[0].APIKeyEnv; got != "" {
				t.Errorf("provider without api_key: APIKeyEnv = %q", got)
			}
		})
	}
}

func TestParseStrict(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown top-level key", "listen: :1\nlistn: :2\n", []string{"line 2: field listn not found"}},
		{"unknown nested key", "providers:\n  - name: m\n    kind: mock\n    base: x\n", []string{"line 4: field base not found"}},
		{"every unknown key", "a: 1\nlog:\n  colour: true\n", []string{"line 1: field a not found", "line 3: field colour not found"}},
		{"removed key nats.data_dir", "nats:\n  url: nats://127.0.0.1:4222\n  data_dir: /var/lib/nats\n",
			[]string{"line 3: field data_dir not found", "nats.data_dir was removed", "-data-dir"}},
		{"bad duration", "read_timeout: soon\n", []string{"line 1:", "soon"}},
		{"duration without unit", "read_timeout: 30\n", []string{"line 1:"}},
		{"bad int", "body_limit: big\n", []string{"line 1:", "big"}},
		{"syntax error", "providers: [\n", []string{"parse yaml"}},
		{"expansion error", "x: ${A", []string{"line 1: unterminated"}},
		{"broken second document", "listen: :1\n---\n[\n", []string{"parse yaml"}},
		{"second document", "listen: :1\n---\nlisten: :2\n", []string{"line 2: a config file holds one YAML document"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src), env(nil))
			if err == nil {
				t.Fatalf("Parse(%q): no error", tt.src)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	for _, src := range []string{"", "# only a comment\n", "---\n"} {
		t.Run(src, func(t *testing.T) {
			c, err := Parse([]byte(src), nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Listen != DefaultListen {
				t.Errorf("listen = %q, want default", c.Listen)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("providers:\n  - {name: x, kind: opnai}\n  - {kind: mock}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOLLGATE_LISTEN", "127.0.0.1:18080")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")

	tests := []struct {
		name string
		path string
		want []string // error substrings; none means success
	}{
		{"good", good, nil},
		{"missing file", filepath.Join(dir, "nope.yaml"), []string{"read config", "nope.yaml"}},
		{"invalid", bad, []string{
			"bad.yaml",
			`providers[0].kind: unknown kind "opnai" (want openai, azure, anthropic, gemini, bedrock or mock)`,
			"providers[1].name: required",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.path)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if c.Listen != "127.0.0.1:18080" {
					t.Errorf("listen = %q, want the TOLLGATE_LISTEN value", c.Listen)
				}
				if p := c.Provider("openai"); p.APIKey != "sk-from-env" || p.APIKeyEnv != "OPENAI_API_KEY" {
					t.Errorf("openai api_key %q env %q", p.APIKey, p.APIKeyEnv)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadInvalidListsEveryProblem(t *testing.T) {
	_, err := Parse([]byte("log: {format: xml}\nproviders:\n  - {name: x, kind: opnai}\n"), nil)
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("error %v is not a joined list", err)
	}
	if n := len(joined.Unwrap()); n != 2 {
		t.Errorf("got %d problems, want 2: %v", n, err)
	}
}

func TestDevConfig(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "dev", "tollgate.yaml")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) == 0 || len(c.Providers) == 0 {
		t.Errorf("dev config has %d models and %d providers, want some", len(c.Models), len(c.Providers))
	}
}

func TestLookup(t *testing.T) {
	c, err := Parse([]byte(minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		model        string
		wantModel    bool
		provider     string
		wantProvider bool
	}{
		{"both known", "gpt-4o", true, "openai", true},
		{"second entries", "mock-chat", true, "mock", true},
		{"unknown", "gpt-5", false, "anthropic", false},
		{"empty", "", false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m := c.Model(tt.model); (m != nil) != tt.wantModel || (m != nil && m.Name != tt.model) {
				t.Errorf("Model(%q) = %v", tt.model, m)
			}
			if p := c.Provider(tt.provider); (p != nil) != tt.wantProvider || (p != nil && p.Name != tt.provider) {
				t.Errorf("Provider(%q) = %v", tt.provider, p)
			}
		})
	}
	// The result points into the config, so callers see one source of truth.
	if c.Model("gpt-4o") != &c.Models[0] {
		t.Error("Model does not return a pointer into Models")
	}
}

func BenchmarkModel(b *testing.B) {
	c := &Config{}
	for i := range 50 {
		c.Models = append(c.Models, Model{Name: "model-" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	name := c.Models[len(c.Models)-1].Name
	b.ReportAllocs()
	for b.Loop() {
		if c.Model(name) == nil {
			b.Fatal("not found")
		}
	}
}

func BenchmarkParse(b *testing.B) {
	data := []byte(minimal)
	getenv := env(map[string]string{"OPENAI_API_KEY": "sk-1"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, getenv); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("x: ${A:-b} $$ ${"))
	f.Add([]byte("providers: [{name: a, kind: openai, base_url: 'http://[::1'}]"))
	f.Add([]byte("models: [{name: m, targets: [{provider: ''}]}]\nprices: {'': {}}"))
	f.Add([]byte("budgets: [{scope: x, amount_usd: '1.0000000001', period: week}]"))
	f.Add([]byte("a: &a [*a]"))
	getenv := env(map[string]string{"A": "1", "OPENAI_API_KEY": "k"})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, getenv)
		if err == nil && c == nil {
			t.Fatal("nil config without error")
		}
		if err == nil {
			// A config that parsed is valid and stays so after defaults again.
			c.ApplyDefaults()
			if err := c.Validate(); err != nil {
				t.Fatalf("parsed config fails Validate: %v", err)
			}
		}
	})
}
