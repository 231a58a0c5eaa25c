package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// secret32 is an HMAC secret of the minimum length.
const secret32 = "0123456789abcdef0123456789abcdef"

// validConfig returns a config that passes Validate, for tests to break.
func validConfig() *Config {
	c := &Config{
		Auth: Auth{Issuers: []Issuer{
			{Name: "dev", Issuer: "tollgate-dev", Algorithms: []string{"HS256"}, Keys: []Key{{KID: "k1", Secret: secret32}}},
			{Name: "corp", Issuer: "https://id.example.com", Algorithms: []string{"RS256", "EdDSA"}, Keys: []Key{{PublicKeyFile: "corp.pem"}}},
		}},
		Providers: []Provider{
			{Name: "openai", Kind: "openai", BaseURL: "https://api.openai.com/v1"},
			{Name: "mock", Kind: "mock"},
		},
		Models: []Model{
			{Name: "gpt-4o", Targets: []Target{{Provider: "openai"}}},
			{Name: "embed", Type: "embeddings", Targets: []Target{{Provider: "mock"}, {Provider: "openai", Model: "text-embedding-3-small"}}},
		},
		Budgets: []BudgetLimit{
			{Scope: "dept", Value: "*", AmountUSD: "250", Period: "month"},
			{Scope: "global", AmountUSD: "0.000000001", Period: "day"},
		},
		RateLimits: []RateLimit{{Scope: "subject", Value: "*", RPM: 60}},
		Prices:     map[string]Price{"gpt-4o": {Input: "2.5", Output: "10"}},
	}
	c.ApplyDefaults()
	return c
}

func TestValidateOK(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"as built", func(*Config) {}},
		{"defaults not applied", func(c *Config) { *c = Config{Providers: []Provider{{Name: "m", Kind: "mock"}}} }},
		{"empty", func(c *Config) { *c = Config{} }},
		{"cache disabled", func(c *Config) { c.Auth.CacheSize = -1 }},
		{"jwks covers other algorithms", func(c *Config) {
			c.Auth.Issuers[0].Algorithms = []string{"HS256", "ES256"}
			c.Auth.Issuers[0].JWKSFile = "jwks.json"
		}},
		{"jwks only", func(c *Config) { c.Auth.Issuers[1].Keys = nil; c.Auth.Issuers[1].JWKSFile = "jwks.json" }},
		{"listen any host", func(c *Config) { c.Listen = ":8080" }},
		{"http base url", func(c *Config) { c.Providers[0].BaseURL = "http://127.0.0.1:11434/v1" }},
		{"mock ignores base url", func(c *Config) { c.Providers[1].BaseURL = "not a url" }},
		{"preset without base url", func(c *Config) { c.Providers[0].BaseURL, c.Providers[0].Preset = "", "groq" }},
		{"public endpoints by default", func(c *Config) {
			c.Providers = append(c.Providers, Provider{Name: "claude", Kind: "anthropic"}, Provider{Name: "gem", Kind: "gemini"},
				Provider{Name: "aws", Kind: "bedrock", Region: "us-east-1"})
		}},
		{"files on azure", func(c *Config) {
			c.Providers = append(c.Providers, Provider{Name: "az", Kind: "azure", BaseURL: "https://r.openai.azure.com", APIVersion: "2024-10-21"})
			c.FilesProvider = "az"
		}},
		{"per request price only", func(c *Config) { c.Prices["x"] = Price{PerRequest: "0.01"} }},
		{"unit prices only", func(c *Config) {
			c.Prices["x"] = Price{PerImage: "0.04"}
			c.Prices["y"] = Price{PerAudioSecond: "0.0001"}
			c.Prices["z"] = Price{Per1MCharacters: "15"}
		}},
		{"files provider openai", func(c *Config) { c.FilesProvider = "openai" }},
		{"files provider mock", func(c *Config) { c.FilesProvider = "mock" }},
		{"nats tls pair", func(c *Config) { c.NATS.TLS = TLS{CertFile: "c.pem", KeyFile: "k.pem"} }},
		{"console oidc", func(c *Config) {
			c.Auth.Issuers[1].DiscoveryURL = "https://id.example.com/.well-known/openid-configuration"
			c.Console = Console{OIDC: ConsoleOIDC{Issuer: "corp", ClientID: "tollgate", RedirectURL: "https://gw.example.com/ui/callback"},
				Roles: []ConsoleRole{{Claim: "/realm_access/roles", Value: "finance", Role: "finance"}}, SessionTTL: time.Hour}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		// top level
		{"console.session_ttl", func(c *Config) { c.Console.SessionTTL = time.Second }, "console.session_ttl: must be at least 1m"},
		{"console.roles role", func(c *Config) { c.Console.Roles = []ConsoleRole{{Claim: "groups", Value: "x", Role: "root"}} }, `console.roles[0].role: unknown role "root"`},
		{"console.roles claim", func(c *Config) { c.Console.Roles = []ConsoleRole{{Claim: "/a~2", Value: "x", Role: "viewer"}} }, "console.roles[0].claim"},
		{"console.oidc.issuer unknown", func(c *Config) {
			c.Console.OIDC = ConsoleOIDC{Issuer: "nope", ClientID: "x", RedirectURL: "https://g/ui/callback"}
		}, `console.oidc.issuer: "nope" names no auth.issuers entry`},
		{"console.oidc.issuer no discovery", func(c *Config) {
			c.Console.OIDC = ConsoleOIDC{Issuer: "corp", ClientID: "x", RedirectURL: "https://g/ui/callback"}
		}, "has no discovery_url"},
		{"console.oidc.client_id", func(c *Config) { c.Console.OIDC = ConsoleOIDC{Issuer: "corp", RedirectURL: "https://g/ui/callback"} }, "console.oidc.client_id: required"},
		{"console.oidc.redirect_url path", func(c *Config) {
			c.Console.OIDC = ConsoleOIDC{Issuer: "corp", ClientID: "x", RedirectURL: "https://g/cb"}
		}, "must end in /ui/callback"},
		{"console.oidc without issuer", func(c *Config) { c.Console.OIDC.ClientID = "x" }, "console.oidc.issuer: name the auth.issuers entry"},
		{"listen", func(c *Config) { c.Listen = "8080" }, `listen: "8080" is not a host:port address`},
		{"body_limit", func(c *Config) { c.BodyLimit = -1 }, "body_limit: must not be negative (got -1)"},
		{"shutdown_grace", func(c *Config) { c.ShutdownGrace = -time.Second }, "shutdown_grace: must not be negative (got -1s)"},
		{"read_timeout", func(c *Config) { c.ReadTimeout = -1 }, "read_timeout: must not be negative"},
		{"idle_timeout", func(c *Config) { c.IdleTimeout = -1 }, "idle_timeout: must not be negative"},
		{"write_timeout", func(c *Config) { c.WriteTimeout = -1 }, "write_timeout: must not be negative"},
		{"budget.leases.ttl", func(c *Config) { c.Budget.Leases.TTL = -1 }, "budget.leases.ttl: must not be negative"},
		{"budget.leases.refill_wait", func(c *Config) { c.Budget.Leases.RefillWait = -1 }, "budget.leases.refill_wait: must not be negative"},
		{"rate_limit.presence_ttl negative", func(c *Config) { c.RateLimit.PresenceTTL = -1 }, "rate_limit.presence_ttl: must be at least 1s (got -1ns)"},
		{"rate_limit.presence_ttl short", func(c *Config) { c.RateLimit.PresenceTTL = 100 * time.Millisecond }, "rate_limit.presence_ttl: must be at least 1s (got 100ms)"},
		{"max_header_bytes", func(c *Config) { c.MaxHeaderBytes = -1 }, "max_header_bytes: must not be negative (got -1)"},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, `log.format: unknown format "xml" (want json or text)`},
		{"log level", func(c *Config) { c.Log.Level = "trace" }, `log.level: unknown level "trace" (want debug, info, warn or error)`},

		// auth
		{"cache size", func(c *Config) { c.Auth.CacheSize = -2 }, "auth.cache_size: must be -1 (disabled), 0 (default) or positive (got -2)"},
		{"issuer name", func(c *Config) { c.Auth.Issuers[1].Name = "" }, "auth.issuers[1].name: required"},
		{"issuer iss", func(c *Config) { c.Auth.Issuers[0].Issuer = " " }, "auth.issuers[0].issuer: required"},
		{"duplicate issuer name", func(c *Config) { c.Auth.Issuers[1].Name = "dev" }, `auth.issuers[1].name: duplicate issuer name "dev" (also auth.issuers[0].name)`},
		{"duplicate iss", func(c *Config) { c.Auth.Issuers[1].Issuer = "tollgate-dev" }, `auth.issuers[1].issuer: duplicate issuer "tollgate-dev" (also auth.issuers[0].issuer)`},
		{"no algorithms", func(c *Config) { c.Auth.Issuers[0].Algorithms = nil }, "auth.issuers[0].algorithms: required"},
		{"bad algorithm", func(c *Config) { c.Auth.Issuers[0].Algorithms = []string{"HS257"} }, `auth.issuers[0].algorithms: "HS257" is not supported`},
		{"none algorithm", func(c *Config) { c.Auth.Issuers[0].Algorithms = []string{"HS256", "none"} }, `auth.issuers[0].algorithms: "none" is not supported`},
		{"lowercase algorithm", func(c *Config) { c.Auth.Issuers[1].Algorithms = []string{"rs256"} }, `auth.issuers[1].algorithms: "rs256" is not supported`},
		{"leeway", func(c *Config) { c.Auth.Issuers[0].Leeway = -time.Second }, "auth.issuers[0].leeway: must not be negative"},
		{"no keys", func(c *Config) { c.Auth.Issuers[0].Keys = nil }, "auth.issuers[0]: needs at least one of keys, jwks_file, jwks_url or discovery_url"},
		{"empty key", func(c *Config) { c.Auth.Issuers[0].Keys[0].Secret = "" }, "auth.issuers[0].keys[0]: no key material"},
		{"two sources", func(c *Config) { c.Auth.Issuers[0].Keys[0].SecretFile = "f" }, "auth.issuers[0].keys[0]: sets secret and secret_file: want exactly one"},
		{"secret without hmac alg", func(c *Config) { c.Auth.Issuers[1].Keys[0] = Key{Secret: secret32} }, "auth.issuers[1].keys[0].secret: an HMAC secret needs an HS256, HS384 or HS512 algorithm"},
		{"public key with hmac alg", func(c *Config) { c.Auth.Issuers[0].Keys[0] = Key{PublicKey: "pem"} }, "auth.issuers[0].keys[0].public_key: a public key needs an RS256, ES256 or EdDSA algorithm"},
		{"short secret", func(c *Config) { c.Auth.Issuers[0].Keys[0].Secret = "short" }, "auth.issuers[0].keys[0].secret: shorter than 32 bytes"},
		{"registered claim", func(c *Config) { c.Auth.Issuers[0].Claims.Team = "aud" }, `auth.issuers[0].claims.team: "aud" is a registered claim`},
		{"shared claim", func(c *Config) { c.Auth.Issuers[1].Claims.Project = "team" }, `auth.issuers[1].claims.project: duplicate claim "team" (also auth.issuers[1].claims.team)`},
		{"hmac alg without secret", func(c *Config) { c.Auth.Issuers[1].Algorithms = []string{"RS256", "HS384"} }, "auth.issuers[1].algorithms: HS384 has no key (add one with secret or secret_file)"},
		{"public alg without public key", func(c *Config) { c.Auth.Issuers[0].Algorithms = []string{"HS256", "ES256"} }, "auth.issuers[0].algorithms: ES256 has no key (add one with public_key"},
		{"http jwks off loopback", func(c *Config) { c.Auth.Issuers[1].JWKSURL = "http://idp.example/keys" }, "auth.issuers[1].jwks_url: plain http is only allowed to a loopback address or with allow_http"},
		{"jwks url scheme", func(c *Config) { c.Auth.Issuers[1].JWKSURL = "ftp://idp.example/keys" }, `auth.issuers[1].jwks_url: "ftp://idp.example/keys": scheme must be https`},
		{"discovery and jwks url", func(c *Config) {
			c.Auth.Issuers[1].JWKSURL = "https://idp.example/keys"
			c.Auth.Issuers[1].DiscoveryURL = "https://idp.example/.well-known/openid-configuration"
		}, "auth.issuers[1]: sets discovery_url and jwks_url: want one"},
		{"refresh bounds", func(c *Config) {
			c.Auth.Issuers[1].JWKSURL = "https://idp.example/keys"
			c.Auth.Issuers[1].JWKSRefreshMin, c.Auth.Issuers[1].JWKSRefreshMax = time.Hour, time.Minute
		}, "auth.issuers[1].jwks_refresh_min: 1h0m0s is above jwks_refresh_max 1m0s"},
		{"mapping without claim", func(c *Config) {
			c.Auth.Issuers[1].ClaimMappings = []ClaimMapping{{Value: "eng", Dept: "eng"}}
		}, "auth.issuers[1].claim_mappings[0].claim: required"},
		{"mapping sets nothing", func(c *Config) {
			c.Auth.Issuers[1].ClaimMappings = []ClaimMapping{{Claim: "groups", Value: "eng"}}
		}, "auth.issuers[1].claim_mappings[0]: sets none of dept, team, project"},
		{"duplicate kid", func(c *Config) {
			c.Auth.Issuers[0].Keys = append(c.Auth.Issuers[0].Keys, Key{KID: "k1", Secret: secret32 + "x"})
		}, `auth.issuers[0].keys[1].kid: duplicate kid "k1" (also auth.issuers[0].keys[0].kid)`},

		// providers
		{"provider name", func(c *Config) { c.Providers[1].Name = "" }, "providers[1].name: required"},
		{"duplicate provider", func(c *Config) { c.Providers[1].Name = "openai" }, `providers[1].name: duplicate provider "openai" (also providers[0].name)`},
		{"provider kind missing", func(c *Config) { c.Providers[1].Kind = "" }, "providers[1].kind: required (openai, azure, anthropic, gemini, bedrock or mock)"},
		{"provider kind", func(c *Config) { c.Providers[1].Kind = "opnai" }, `providers[1].kind: unknown kind "opnai" (want openai, azure, anthropic, gemini, bedrock or mock)`},
		{"unknown preset", func(c *Config) { c.Providers[1].Kind = "openai"; c.Providers[1].Preset = "nope" }, `providers[1].preset: unknown preset "nope"`},
		{"preset on another kind", func(c *Config) { c.Providers[1].Kind = "gemini"; c.Providers[1].Preset = "groq" }, "providers[1].preset: only kind openai takes a preset"},
		{"azure without api_version", func(c *Config) { c.Providers[1].Kind = "azure"; c.Providers[1].BaseURL = "https://x.openai.azure.com" }, "providers[1].api_version: required"},
		{"bedrock without region", func(c *Config) { c.Providers[1].Kind = "bedrock" }, "providers[1].region: required"},
		{"azure without base_url", func(c *Config) { c.Providers[1].Kind = "azure"; c.Providers[1].APIVersion = "2024-10-21" }, "providers[1].base_url: required"},
		{"openai without base_url or preset", func(c *Config) { c.Providers[1].Kind = "openai" }, "providers[1].base_url: required"},
		{"openai preset with a bad base_url", func(c *Config) {
			c.Providers[1].Kind, c.Providers[1].Preset, c.Providers[1].BaseURL = "openai", "vllm", "ftp://x"
		}, `providers[1].base_url: "ftp://x" is not an http or https URL`},
		{"gemini with a bad base_url", func(c *Config) { c.Providers[1].Kind = "gemini"; c.Providers[1].BaseURL = "x" }, `providers[1].base_url: "x" is not an http or https URL`},
		{"preset on mock", func(c *Config) { c.Providers[1].Preset = "groq" }, "providers[1].preset: only kind openai takes a preset"},
		{"degrade step fraction", func(c *Config) {
			c.Budgets = []BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "10", Period: "month", Degrade: []DegradeStep{{At: 1.5, Refuse: true}}}}
		}, "budgets[0].degrade[0].at: 1.5 is not a fraction between 0 and 1"},
		{"degrade step action", func(c *Config) {
			c.Budgets = []BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "10", Period: "month", Degrade: []DegradeStep{{At: 0.8}}}}
		}, "budgets[0].degrade[0]: set exactly one of model or refuse"},
		{"degrade step model", func(c *Config) {
			c.Budgets = []BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "10", Period: "month", Degrade: []DegradeStep{{At: 0.8, Model: "nope"}}}}
		}, `budgets[0].degrade[0].model: unknown model "nope"`},
		{"degrade step priority", func(c *Config) {
			c.Budgets = []BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "10", Period: "month", Degrade: []DegradeStep{{At: 0.8, Refuse: true, Priorities: []string{"Batch", "bulk"}}}}}
		}, `budgets[0].degrade[0].priorities[1]: unknown priority "bulk" (want interactive, background or batch; see priority.levels)`},
		{"degrade step priority of configured levels", func(c *Config) {
			c.Priority.Levels = []string{"gold", "silver"}
			c.Budgets = []BudgetLimit{{Scope: "dept", Value: "*", AmountUSD: "10", Period: "month", Degrade: []DegradeStep{{At: 0.8, Refuse: true, Priorities: []string{"batch"}}}}}
		}, `budgets[0].degrade[0].priorities[0]: unknown priority "batch" (want gold or silver; see priority.levels)`},
		{"priority levels repeated in another case", func(c *Config) { c.Priority.Levels = []string{"gold", "Gold"} },
			`priority.levels[1]: duplicate priority "gold" (also priority.levels[0])`},
		{"priority default not a level", func(c *Config) { c.Priority.Default = "vip" },
			`priority.default: unknown priority "vip" (want interactive, background or batch)`},
		{"priority claim on a registered claim", func(c *Config) { c.Auth.Issuers[0].Claims.Priority = "exp" },
			`"exp" is a registered claim`},
		{"stream_usage value", func(c *Config) {
			c.Providers[1].Kind = "openai"
			c.Providers[1].BaseURL = "http://x"
			c.Providers[1].StreamUsage = "sometimes"
		}, `providers[1].stream_usage: unknown stream_usage "sometimes"`},
		{"base_url missing", func(c *Config) { c.Providers[0].BaseURL = "" }, "providers[0].base_url: required"},
		{"base_url scheme", func(c *Config) { c.Providers[0].BaseURL = "ftp://x/v1" }, `providers[0].base_url: "ftp://x/v1" is not an http or https URL`},
		{"base_url no host", func(c *Config) { c.Providers[0].BaseURL = "https:///v1" }, "is not an http or https URL"},
		{"base_url relative", func(c *Config) { c.Providers[0].BaseURL = "api.openai.com/v1" }, "is not an http or https URL"},
		{"connect timeout", func(c *Config) { c.Providers[0].Timeouts.Connect = -1 }, "providers[0].timeouts.connect: must not be negative"},
		{"first_byte timeout", func(c *Config) { c.Providers[0].Timeouts.FirstByte = -1 }, "providers[0].timeouts.first_byte: must not be negative"},
		{"idle timeout", func(c *Config) { c.Providers[0].Timeouts.Idle = -1 }, "providers[0].timeouts.idle: must not be negative"},
		{"total timeout", func(c *Config) { c.Providers[0].Timeouts.Total = -1 }, "providers[0].timeouts.total: must not be negative"},
		{"max_conns", func(c *Config) { c.Providers[1].MaxConns = -5 }, "providers[1].max_conns: must not be negative (got -5)"},
		{"max_idle_conn_duration", func(c *Config) { c.Providers[1].MaxIdleConnDuration = -1 }, "providers[1].max_idle_conn_duration: must not be negative"},
		{"max_response_body", func(c *Config) { c.Providers[1].MaxResponseBody = -1 }, "providers[1].max_response_body: must not be negative"},

		// models
		{"model name", func(c *Config) { c.Models[0].Name = "" }, "models[0].name: required"},
		{"duplicate model", func(c *Config) { c.Models[1].Name = "gpt-4o" }, `models[1].name: duplicate model "gpt-4o" (also models[0].name)`},
		{"model type", func(c *Config) { c.Models[0].Type = "images" }, `models[0].type: unknown type "images" (want chat, embeddings, image, speech, transcription or moderation)`},
		{"no targets", func(c *Config) { c.Models[0].Targets = nil }, "models[0].targets: required (at least one target)"},
		{"target provider missing", func(c *Config) { c.Models[1].Targets[1].Provider = "" }, "models[1].targets[1].provider: required"},
		{"target provider unknown", func(c *Config) { c.Models[0].Targets[0].Provider = "x" }, `models[0].targets[0].provider: unknown provider "x"`},

		// budgets, rate limits
		{"budget scope", func(c *Config) { c.Budgets[0].Scope = "org" }, `budgets[0].scope: unknown scope "org" (want key, subject, team, dept, project or global)`},
		{"budget scope missing", func(c *Config) { c.Budgets[0].Scope = "" }, "budgets[0].scope: required"},
		{"budget period", func(c *Config) { c.Budgets[1].Period = "week" }, `budgets[1].period: unknown period "week" (want day, month or total)`},
		{"budget period missing", func(c *Config) { c.Budgets[1].Period = "" }, "budgets[1].period: required (day, month or total)"},
		{"budget amount missing", func(c *Config) { c.Budgets[0].AmountUSD = "" }, "budgets[0].amount_usd: required"},
		{"budget amount negative", func(c *Config) { c.Budgets[0].AmountUSD = "-5" }, `budgets[0].amount_usd: "-5" is not a decimal amount`},
		{"budget amount float syntax", func(c *Config) { c.Budgets[0].AmountUSD = "1e3" }, `"1e3" is not a decimal amount`},
		{"budget amount trailing dot", func(c *Config) { c.Budgets[0].AmountUSD = "12." }, `"12." is not a decimal amount`},
		{"budget amount leading dot", func(c *Config) { c.Budgets[0].AmountUSD = ".5" }, `".5" is not a decimal amount`},
		{"budget amount too precise", func(c *Config) { c.Budgets[0].AmountUSD = "0.0000000001" }, `budgets[0].amount_usd: "0.0000000001" has more than 9 decimal places`},
		{"budget value missing", func(c *Config) { c.Budgets[0].Value = "" }, `budgets[0].value: required (a value of scope dept, or "*" for each value)`},
		{"budget team without its dept", func(c *Config) { c.Budgets[0].Scope, c.Budgets[0].Value = "team", "ml" },
			`budgets[0].value: team value "ml" must name its department: write "<dept>/ml" for team ml of one department, "*/ml" for team ml of every department, or "*" for every team`},
		{"budget project without its dept", func(c *Config) { c.Budgets[0].Scope, c.Budgets[0].Value = "project", "p1" }, `budgets[0].value: project value "p1" must name its department`},
		{"budget each team of one dept", func(c *Config) { c.Budgets[0].Scope, c.Budgets[0].Value = "team", "research/*" }, `budgets[0].value: team value "research/*": a limit for each team of one department is not supported`},
		{"budget team name missing", func(c *Config) { c.Budgets[0].Scope, c.Budgets[0].Value = "team", "research/" }, `budgets[0].value: team value "research/" has no team name after the department`},
		{"budget dept part raw star", func(c *Config) { c.Budgets[0].Scope, c.Budgets[0].Value = "team", "r*/ml" }, `write a department named with "*" as %2A`},
		{"budget dept part bad escape", func(c *Config) { c.Budgets[0].Scope, c.Budgets[0].Value = "team", "r%2/ml" }, `% must start %25, %2F or %2A`},
		{"rate limit scope", func(c *Config) { c.RateLimits[0].Scope = "global" }, `rate_limits[0].scope: unknown scope "global" (want key, subject, team, dept or project)`},
		{"rate limit rpm", func(c *Config) { c.RateLimits[0].RPM = -1 }, "rate_limits[0].rpm: must not be negative"},
		{"rate limit tpm", func(c *Config) { c.RateLimits[0].TPM = -1 }, "rate_limits[0].tpm: must not be negative"},

		// nats, usage, prices
		{"nats replicas", func(c *Config) { c.NATS.Replicas = 7 }, "nats.replicas: must be between 1 and 5 (got 7)"},
		{"nats max_age", func(c *Config) { c.NATS.MaxAge = -1 }, "nats.max_age: must not be negative"},
		{"nats duplicate_window", func(c *Config) { c.NATS.DuplicateWindow = -1 }, "nats.duplicate_window: must not be negative"},
		{"nats tls half", func(c *Config) { c.NATS.TLS.CertFile = "c.pem" }, "nats.tls: cert_file and key_file go together"},
		{"usage buffer", func(c *Config) { c.Usage.Buffer = -1 }, "usage.buffer: must not be negative"},
		{"usage spool", func(c *Config) { c.Usage.SpoolMaxBytes = -1 }, "usage.spool_max_bytes: must not be negative"},
		{"usage batch size", func(c *Config) { c.Usage.BatchSize = -1 }, "usage.batch_size: must not be negative"},
		{"usage batch bytes", func(c *Config) { c.Usage.BatchBytes = 8 << 20 }, "usage.batch_bytes: must be between 1 and 4194304 (got 8388608)"},
		{"usage sync", func(c *Config) { c.Usage.SyncInterval = -1 }, "usage.sync_interval: must not be negative"},
		{"unpriced model", func(c *Config) { c.Usage.UnpricedModel = "free" }, `usage.unpriced_model: unknown value "free" (want zero or refuse)`},
		{"usage compression", func(c *Config) { c.Usage.Compression = "gzip" }, `usage.compression: unknown value "gzip" (want s2 or none)`},
		{"price decimal", func(c *Config) { c.Prices["gpt-4o"] = Price{Input: "2,5"} }, `prices["gpt-4o"].input: "2,5" is not a decimal amount`},
		{"price empty", func(c *Config) { c.Prices["m"] = Price{} }, `prices["m"]: sets no price`},
		{"price empty model", func(c *Config) { c.Prices[""] = Price{Output: "1"} }, `prices[""]: empty model name`},
		{"price per image", func(c *Config) { c.Prices["i"] = Price{PerImage: "-1"} }, `prices["i"].per_image: "-1" is not a decimal amount`},
		{"price per image size", func(c *Config) { c.Prices["i"] = Price{PerImageBy: map[string]string{"*/1024x1792": "x"}} },
			`prices["i"].per_image_by["*/1024x1792"]: "x" is not a decimal amount`},
		{"price per image key", func(c *Config) { c.Prices["i"] = Price{PerImageBy: map[string]string{"1024x1792": "0.08"}} },
			`prices["i"].per_image_by: per_image_by["1024x1792"]: want quality/size`},
		{"price per audio second", func(c *Config) { c.Prices["a"] = Price{PerAudioSecond: "0.0000000001"} }, `prices["a"].per_audio_second: "0.0000000001" has more than 9 decimal places`},
		{"price per 1m characters", func(c *Config) { c.Prices["s"] = Price{Per1MCharacters: "1e3"} }, `prices["s"].per_1m_characters: "1e3" is not a decimal amount`},
		{"price cache write", func(c *Config) { c.Prices["c"] = Price{CacheWrite: "3,75"} }, `prices["c"].cache_write: "3,75" is not a decimal amount`},
		{"long tier without size", func(c *Config) { c.Prices["l"] = Price{Input: "1", Long: &LongPrice{Input: "2"}} },
			`prices["l"].long.above_prompt_tokens: must be set and above 0`},
		{"long tier without price", func(c *Config) { c.Prices["l"] = Price{Input: "1", Long: &LongPrice{AbovePromptTokens: 10}} },
			`prices["l"].long: sets no price (input, output, cached_input or cache_write)`},
		{"long tier decimal", func(c *Config) {
			c.Prices["l"] = Price{Input: "1", Long: &LongPrice{AbovePromptTokens: 10, CacheWrite: "-1"}}
		}, `prices["l"].long.cache_write: "-1" is not a decimal amount`},
		{"service tier without price", func(c *Config) { c.Prices["t"] = Price{Input: "1", Tiers: &Tiers{Flex: &TierPrice{}}} },
			`prices["t"].tiers.flex: sets no price (input, output or cached_input)`},
		{"service tier decimal", func(c *Config) { c.Prices["t"] = Price{Input: "1", Tiers: &Tiers{Priority: &TierPrice{Output: "x"}}} },
			`prices["t"].tiers.priority.output: "x" is not a decimal amount`},
		{"files provider unknown", func(c *Config) { c.FilesProvider = "nope" }, `files_provider: unknown provider "nope"`},
		{"files provider wrong kind", func(c *Config) {
			c.Providers = append(c.Providers, Provider{Name: "claude", Kind: "anthropic"})
			c.FilesProvider = "claude"
		}, `files_provider: provider "claude" is of kind anthropic, which has no files or batches API (want openai, azure or mock)`},
		{"batch without files provider", func(c *Config) { c.Models[0].Batch = true }, `models[0].batch: batches need a files_provider`},
		{"batch on a model the files provider calls otherwise", func(c *Config) {
			c.FilesProvider, c.Models[1].Batch = "openai", true
		}, `models[1].batch: the files_provider openai must serve "embed" under that name (a target on it without another model name)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant substring %q", err, tt.want)
			}
		})
	}
}

func TestValidateCollectsAll(t *testing.T) {
	c := validConfig()
	c.Log.Format = "xml"
	c.Providers[0].Kind = "opnai"
	c.Models[0].Targets[0].Provider = "nope"
	c.Auth.Issuers[0].Algorithms = []string{"HS257"}
	err := c.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("error %v is not joined", err)
	}
	// The HS257 issuer also loses its only HMAC algorithm, so its secret is
	// reported too.
	want := []string{"log.format", "auth.issuers[0].algorithms", "auth.issuers[0].keys[0].secret", "providers[0].kind", "models[0].targets[0].provider"}
	got := joined.Unwrap()
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i].Error(), w+":") {
			t.Errorf("problem %d = %q, want prefix %q", i, got[i], w)
		}
	}
}

// TestValidateQualifiedLimits: team and project values that name their
// department are accepted.
func TestValidateQualifiedLimits(t *testing.T) {
	for _, v := range []string{"research/ml", "*/ml", "*", "/ml", "a%2Fb/c", "%2A/x", "research/a/b", "50%25/x"} {
		t.Run(v, func(t *testing.T) {
			c := validConfig()
			c.Budgets = append(c.Budgets, BudgetLimit{Scope: "team", Value: v, AmountUSD: "1", Period: "day"},
				BudgetLimit{Scope: "project", Value: v, AmountUSD: "1", Period: "day"})
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
