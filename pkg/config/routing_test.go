package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const routingYAML = `
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com/v1"}
  - {name: backup, kind: mock}
routing:
  default_fallback: cheap
  retry: {max_attempts: 2, backoff_base: 100ms, deadline: 20s}
  circuit: {failures: 3, failure_rate: 0.5, cooldown: 1m}
models:
  - name: gpt-4o
    aliases: [gpt4, smart]
    strategy: latency
    fallbacks: [cheap]
    retry: {max_attempts: 3}
    fallback_on: [5xx, content_policy]
    hedge: {after: p95}
    cache: {ttl: 10m, share_across_scopes: true}
    targets:
      - {provider: openai, weight: 3, rpm: 600, tpm: 90000, api_keys: ["${K1}", "${K2}"]}
      - {provider: backup, model: big}
  - name: cheap
    fallback_on: []
    targets: [{provider: backup}]
  - name: "openai/*"
    targets: [{provider: openai}]
`

func TestParseRouting(t *testing.T) {
	c, err := Parse([]byte(routingYAML), env(map[string]string{"K1": "sk-1", "K2": "sk-2"}))
	if err != nil {
		t.Fatal(err)
	}
	m, cheap, wild := c.Models[0], c.Models[1], c.Models[2]
	checks := []struct {
		name      string
		got, want any
	}{
		{"default_fallback", c.Routing.DefaultFallback, "cheap"},
		{"retry", c.Routing.Retry, Retry{MaxAttempts: 2, BackoffBase: 100 * time.Millisecond, BackoffMax: 5 * time.Second, Deadline: 20 * time.Second}},
		{"circuit", c.Routing.Circuit, Circuit{Failures: 3, FailureRate: 0.5, Window: time.Minute, MinRequests: 20, Cooldown: time.Minute}},
		{"global fallback_on default", strings.Join(c.Routing.FallbackOn, ","), "connect,timeout,429,5xx,quota,context_length"},
		{"aliases", strings.Join(m.Aliases, ","), "gpt4,smart"},
		{"strategy", m.Strategy, "latency"},
		{"model retry overrides one field", m.Retry, Retry{MaxAttempts: 3, BackoffBase: 100 * time.Millisecond, BackoffMax: 5 * time.Second, Deadline: 20 * time.Second}},
		{"model fallback_on", strings.Join(m.FallbackOn, ","), "5xx,content_policy"},
		{"empty fallback_on stays empty", len(cheap.FallbackOn) == 0 && cheap.FallbackOn != nil, true},
		{"inherited retry", cheap.Retry.MaxAttempts, 2},
		{"default strategy", cheap.Strategy, "weighted"},
		{"hedge", m.Hedge.After, "p95"},
		{"cache", m.Cache, ModelCache{TTL: 10 * time.Minute, ShareAcrossScopes: true, Bill: "zero"}},
		{"weight", m.Targets[0].Weight, 3},
		{"default weight", m.Targets[1].Weight, 1},
		{"rpm", m.Targets[0].RPM, int64(600)},
		{"tpm", m.Targets[0].TPM, int64(90000)},
		{"api_keys expanded", strings.Join(m.Targets[0].APIKeys, ","), "sk-1,sk-2"},
		{"wildcard target passes the capture", wild.Targets[0].Model, "*"},
		{"cache off by default", cheap.Cache.TTL, time.Duration(0)},
	}
	for _, ck := range checks {
		t.Run(ck.name, func(t *testing.T) {
			if ck.got != ck.want {
				t.Errorf("got %#v, want %#v", ck.got, ck.want)
			}
		})
	}
}

func TestRoutingDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routing
	if r.Retry.MaxAttempts != 1 || r.DefaultFallback != "" || len(c.Models[0].Fallbacks) != 0 {
		t.Errorf("retries or fallbacks on by default: %+v", r)
	}
	if slices.Contains(r.FallbackOn, TriggerContentPolicy) || slices.Contains(r.FallbackOn, TriggerAuth) {
		t.Errorf("fallback_on %v: content_policy and auth must be off by default", r.FallbackOn)
	}
	if r.Circuit != (Circuit{Failures: 5, Window: time.Minute, MinRequests: 20, Cooldown: 30 * time.Second}) {
		t.Errorf("circuit %+v", r.Circuit)
	}
	if m := c.Models[0]; m.Hedge.After != "" || m.Cache.TTL != 0 || m.Strategy != StrategyWeighted {
		t.Errorf("model %+v: hedging or caching on by default", m)
	}
	c.ApplyDefaults()
	if c.Routing.Retry.MaxAttempts != 1 || len(c.Models[0].FallbackOn) != 6 {
		t.Error("ApplyDefaults is not idempotent")
	}
}

func TestValidateRouting(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string // "" for valid
	}{
		{"valid wildcard", func(c *Config) {
			c.Models = append(c.Models, Model{Name: "openai/*", Targets: []Target{{Provider: "openai"}}})
		}, ""},
		{"valid fallback by alias", func(c *Config) {
			c.Models[0].Aliases = []string{"four"}
			c.Models = append(c.Models, Model{Name: "m2", Fallbacks: []string{"four"}, Targets: []Target{{Provider: "openai"}}})
		}, ""},
		{"two stars", func(c *Config) { c.Models[0].Name = "*/*" }, `models[0].name: a wildcard route has one "*"`},
		{"alias clash", func(c *Config) { c.Models[0].Aliases = []string{"embed"} }, `models[0].aliases[0]: "embed" is already the name of another model`},
		{"duplicate alias", func(c *Config) {
			c.Models[0].Aliases = []string{"x"}
			c.Models[1].Aliases = []string{"x"}
		}, `models[1].aliases[0]: duplicate alias "x"`},
		{"wildcard alias", func(c *Config) { c.Models[0].Aliases = []string{"a*"} }, "an alias cannot be a wildcard"},
		{"empty alias", func(c *Config) { c.Models[0].Aliases = []string{""} }, "models[0].aliases[0]: required"},
		{"strategy", func(c *Config) { c.Models[0].Strategy = "random" }, `models[0].strategy: unknown strategy "random"`},
		{"valid wildcard pattern", func(c *Config) {
			c.Models = append(c.Models, Model{Name: "openai/*", WildcardPattern: `gpt-[0-9a-z.-]+`, Targets: []Target{{Provider: "openai"}}})
		}, ""},
		{"wildcard pattern on an exact name", func(c *Config) { c.Models[0].WildcardPattern = ".*" },
			`models[0].wildcard_pattern: only a wildcard route (a name with "*") takes a pattern`},
		{"bad wildcard pattern", func(c *Config) {
			c.Models = append(c.Models, Model{Name: "openai/*", WildcardPattern: `gpt-(`, Targets: []Target{{Provider: "openai"}}})
		}, "wildcard_pattern: not a regular expression"},
		{"weight", func(c *Config) { c.Models[0].Targets[0].Weight = -1 }, "models[0].targets[0].weight: must not be negative"},
		{"rpm", func(c *Config) { c.Models[0].Targets[0].RPM = -5 }, "models[0].targets[0].rpm: must not be negative"},
		{"empty key", func(c *Config) { c.Models[0].Targets[0].APIKeys = []string{"sk", ""} }, "models[0].targets[0].api_keys[1]: empty"},
		{"star in a plain target", func(c *Config) { c.Models[0].Targets[0].Model = "x-*" }, "only in a wildcard route's targets"},
		{"unknown fallback", func(c *Config) { c.Models[0].Fallbacks = []string{"nope"} }, `models[0].fallbacks[0]: unknown model "nope"`},
		{"self fallback", func(c *Config) { c.Models[0].Fallbacks = []string{"gpt-4o"} }, "cannot be its own fallback"},
		{"fallback of another type", func(c *Config) { c.Models[0].Fallbacks = []string{"embed"} }, `"embed" is a embeddings model`},
		{"wildcard fallback", func(c *Config) { c.Models[0].Fallbacks = []string{"openai/*"} }, "a fallback cannot be a wildcard"},
		{"duplicate fallback", func(c *Config) {
			c.Models = append(c.Models, Model{Name: "m2", Aliases: []string{"m2b"}, Targets: []Target{{Provider: "openai"}}})
			c.Models[0].Fallbacks = []string{"m2", "m2b"}
		}, `models[0].fallbacks[1]: duplicate fallback "m2"`},
		{"unknown default fallback", func(c *Config) { c.Routing.DefaultFallback = "nope" }, `routing.default_fallback: unknown model "nope"`},
		{"max attempts", func(c *Config) { c.Routing.Retry.MaxAttempts = 11 }, "routing.retry.max_attempts: must be between 1 and 10"},
		{"model max attempts", func(c *Config) { c.Models[0].Retry.MaxAttempts = -1 }, "models[0].retry.max_attempts"},
		{"backoff order", func(c *Config) { c.Routing.Retry.BackoffBase = time.Minute }, "routing.retry.backoff_base: 1m0s is above backoff_max"},
		{"deadline", func(c *Config) { c.Models[0].Retry.Deadline = -time.Second }, "models[0].retry.deadline: must not be negative"},
		{"trigger", func(c *Config) { c.Routing.FallbackOn = []string{"4xx"} }, `routing.fallback_on[0]: unknown trigger "4xx"`},
		{"empty trigger", func(c *Config) { c.Models[0].FallbackOn = []string{""} }, "models[0].fallback_on[0]: empty trigger"},
		{"failure rate", func(c *Config) { c.Routing.Circuit.FailureRate = 1.5 }, "routing.circuit.failure_rate: must be between 0 and 1"},
		{"cooldown", func(c *Config) { c.Routing.Circuit.Cooldown = -1 }, "routing.circuit.cooldown: must not be negative"},
		{"hedge", func(c *Config) { c.Models[0].Hedge.After = "p99" }, `models[0].hedge.after: "p99" is neither a positive duration nor "p95"`},
		{"hedge zero", func(c *Config) { c.Models[0].Hedge.After = "0s" }, "models[0].hedge.after"},
		{"hedge with nothing to race", func(c *Config) { c.Models[0].Hedge.After = "2s" }, "models[0].hedge.after: nothing to race"},
		{"hedge on a second target", func(c *Config) { c.Models[1].Hedge.After = "p95" }, ""},
		{"hedge on a fallback", func(c *Config) {
			c.Models = append(c.Models, Model{Name: "m2", Targets: []Target{{Provider: "mock"}}})
			c.Models[0].Fallbacks, c.Models[0].Hedge.After = []string{"m2"}, "1s"
		}, ""},
		{"hedge on the default fallback", func(c *Config) {
			c.Models = append(c.Models, Model{Name: "m2", Targets: []Target{{Provider: "mock"}}})
			c.Routing.DefaultFallback, c.Models[0].Hedge.After = "m2", "1s"
		}, ""},
		{"cache ttl", func(c *Config) { c.Models[0].Cache.TTL = -time.Minute }, "models[0].cache.ttl: must not be negative"},
		{"cache bill", func(c *Config) { c.Models[0].Cache.Bill = "half" }, `models[0].cache.bill: unknown bill "half"`},
		{"too many targets", func(c *Config) { c.Models[0].Targets = make([]Target, 65) }, "models[0].targets: at most 64 targets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate: %v\nwant an error containing %q", err, tt.want)
			}
		})
	}
}
