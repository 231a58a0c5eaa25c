package config

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Routing configures what happens when a target fails: retries, the global
// fallback model and circuit breaking. Every mechanism is off or minimal by
// default: one call per model and no fallback unless configured; the circuit
// breaker is on (it only ever moves traffic to targets the config lists).
type Routing struct {
	// DefaultFallback is a model tried last, after a model's own
	// fallbacks, for every model of the same type that is not itself.
	// Empty (default): none.
	DefaultFallback string `yaml:"default_fallback"`
	// Retry bounds the calls made for one request. Models may override
	// each field.
	Retry Retry `yaml:"retry"`
	// FallbackOn lists the failures after which another call is made (a
	// retry on the model's targets, then its fallbacks): connect, timeout,
	// 429, 5xx, quota, context_length, content_policy, auth. Default all
	// but content_policy (a refusal is not laundered through another
	// provider unless a route says so) and auth (a credentials problem is
	// the operator's to fix). An empty list, [], turns every retry and
	// fallback off. Models may override it.
	FallbackOn []string `yaml:"fallback_on"`
	// Circuit configures the per-target circuit breaker; a target is a
	// provider and an upstream model.
	Circuit Circuit `yaml:"circuit"`
}

// Retry bounds the upstream calls made for one request.
type Retry struct {
	// MaxAttempts is the number of calls made to one model's targets for a
	// request, before its fallbacks; 1 to 10. Default 1: no retry. With several
	// targets the calls go to different targets first. Each fallback model
	// gets its own max_attempts.
	MaxAttempts int `yaml:"max_attempts"`
	// BackoffBase is the pause before the first retry of a target already
	// tried for the request; it doubles with each further retry, with
	// jitter (a pause is drawn between half and all of it). A call to a
	// target not yet tried does not wait. Default 200ms.
	BackoffBase time.Duration `yaml:"backoff_base"`
	// BackoffMax caps one pause, and the Retry-After a retry waits for: a
	// target asking for a longer wait is not retried. Default 5s.
	BackoffMax time.Duration `yaml:"backoff_max"`
	// Deadline bounds the time from the start of a request's first call
	// during which further calls may start: no retry or fallback starts
	// after it. Default 30s.
	Deadline time.Duration `yaml:"deadline"`
}

// Circuit configures the per-target circuit breaker (a target is a provider
// and an upstream model). A target that trips it is skipped for cooldown,
// then one request probes it (half-open): success closes the circuit,
// failure opens it for another cooldown. While every candidate target of a
// request is open, the request is sent anyway.
type Circuit struct {
	// Failures is the number of consecutive failures that opens the circuit.
	// Default 5; negative turns this rule off.
	Failures int `yaml:"failures"`
	// FailureRate is the share of failed calls within window, between 0
	// and 1, that opens the circuit (once at least min_requests calls were
	// made). Default 0: rule off.
	FailureRate float64 `yaml:"failure_rate"`
	// Window is the span failure_rate looks at. Default 60s.
	Window time.Duration `yaml:"window"`
	// MinRequests is the fewest calls within window for failure_rate to
	// apply. Default 20.
	MinRequests int `yaml:"min_requests"`
	// Cooldown is how long an open circuit skips its target before a probe.
	// Default 30s.
	Cooldown time.Duration `yaml:"cooldown"`
}

// Hedge configures hedged requests. The gateway starts the same request
// on the next target when the first has not answered its first byte in
// time, and uses whichever answers first.
type Hedge struct {
	// After is the delay: a positive duration ("2s"), or "p95" for the
	// first target's observed 95th percentile time to first token (no
	// hedge until it has answered 20 requests). Empty (default): no
	// hedging. The model needs a second target to race, its own or a
	// fallback's: a model with one target and no fallback is a config
	// error.
	After string `yaml:"after"`
}

// ModelCache configures the exact-match response cache of one model.
type ModelCache struct {
	// TTL is how long an answer is served from the cache. Default 0: no
	// caching.
	//
	// The cache serves chat, completions, embeddings, /v1/responses and
	// /v1/messages, keyed by endpoint (the same body on two endpoints is
	// two entries). Streams are replayed event by event. Answers carry
	// x-tollgate-cache: hit, miss or bypass. A request with Cache-Control:
	// no-cache skips the read; no-store skips the read and the write. An
	// answer whose output limit a budget clamped is not stored, since
	// teammates sending the same body would get the cut answer.
	TTL time.Duration `yaml:"ttl"`
	// ShareAcrossScopes lets callers of different departments and teams
	// share cached answers. Default false: each dept/team pair has its own.
	ShareAcrossScopes bool `yaml:"share_across_scopes"`
	// Bill is what a cache hit costs the caller: "zero" (default) or
	// "full" (the original answer's tokens, at the current price). Hits are
	// marked cache_hit in usage events.
	//
	// A hit is admitted like any request before it is served: it counts
	// against rpm limits (429 rate_limit_exceeded) and is refused while the
	// usage backlog is full. With full it also charges its tokens to tpm
	// limits and reserves its exact cost against the budgets (429
	// budget_exceeded when it does not fit). With zero it uses no provider
	// tokens and costs nothing, so tpm limits and budgets do not count it.
	Bill string `yaml:"bill"`
}

// Routing defaults, documented on the fields.
const (
	DefaultStrategy        = StrategyWeighted
	DefaultWeight          = 1
	DefaultMaxAttempts     = 1
	DefaultBackoffBase     = 200 * time.Millisecond
	DefaultBackoffMax      = 5 * time.Second
	DefaultRetryDeadline   = 30 * time.Second
	DefaultCircuitFailures = 5
	DefaultCircuitWindow   = time.Minute
	DefaultMinRequests     = 20
	DefaultCooldown        = 30 * time.Second
	DefaultCacheBill       = CacheBillZero
	// MaxAttemptsLimit caps Retry.MaxAttempts.
	MaxAttemptsLimit = 10
	// MaxTargets caps the targets of one model.
	MaxTargets = 64
)

// Values of the routing fields.
const (
	StrategyWeighted      = "weighted"       // Model.Strategy: random, in proportion to weights
	StrategyRoundRobin    = "round_robin"    // Model.Strategy: each target in turn
	StrategyLeastInFlight = "least_inflight" // Model.Strategy: fewest calls in progress
	StrategyLatency       = "latency"        // Model.Strategy: lowest moving average time to first token
	StrategyOrdered       = "ordered"        // Model.Strategy: the first available target in list order

	TriggerConnect       = "connect"        // FallbackOn: connection refused, reset or failed
	TriggerTimeout       = "timeout"        // FallbackOn: no first byte in time
	TriggerRateLimited   = "429"            // FallbackOn: the upstream is rate limiting
	TriggerServerError   = "5xx"            // FallbackOn: the upstream failed
	TriggerQuota         = "quota"          // FallbackOn: insufficient quota, billing
	TriggerContextLength = "context_length" // FallbackOn: the prompt is too long for the model
	TriggerContentPolicy = "content_policy" // FallbackOn: refused by the provider's content policy
	TriggerAuth          = "auth"           // FallbackOn: the upstream rejected the gateway's credentials

	HedgeP95 = "p95" // Hedge.After

	CacheBillZero = "zero" // ModelCache.Bill
	CacheBillFull = "full" // ModelCache.Bill
)

// DefaultFallbackOn returns the default Routing.FallbackOn: every trigger
// but content_policy (a refusal must not be laundered through another
// provider unless a route says so) and auth (a credentials problem is the
// operator's to fix).
func DefaultFallbackOn() []string {
	return []string{TriggerConnect, TriggerTimeout, TriggerRateLimited, TriggerServerError,
		TriggerQuota, TriggerContextLength}
}

// Triggers lists every FallbackOn value.
func Triggers() []string {
	return append(DefaultFallbackOn(), TriggerContentPolicy, TriggerAuth)
}

// Strategies lists every Model.Strategy value.
func Strategies() []string {
	return []string{StrategyWeighted, StrategyRoundRobin, StrategyLeastInFlight, StrategyLatency, StrategyOrdered}
}

// DefaultWildcardPattern is what a wildcard route's "*" may stand for
// when the model sets no wildcard_pattern: one or more "/"-separated
// segments, each a letter or digit followed by letters, digits and
// . _ - : @ + (the characters of every provider's model ids, Bedrock ARNs
// and Hugging Face repository names), so no segment is empty, "." or "..".
// Whatever the pattern lets through, the request builders escape it as one
// URL path segment, and no name longer than MaxWildcardCapture or with
// control characters is ever passed on.
const DefaultWildcardPattern = `[A-Za-z0-9][A-Za-z0-9._:@+-]*(/[A-Za-z0-9][A-Za-z0-9._:@+-]*)*`

// MaxWildcardCapture is the longest part of a requested name, in bytes,
// that a wildcard route passes upstream, whatever its pattern.
const MaxWildcardCapture = 256

// IsWildcard reports whether a model name is a wildcard route such as
// "openai/*": it matches every name with the same text around the "*" and
// passes the part the "*" stands for to the upstream.
func IsWildcard(name string) bool { return strings.Contains(name, "*") }

// applyRoutingDefaults fills the routing section, then each model's routing
// fields from it, so a model's fields are complete after ApplyDefaults.
func (c *Config) applyRoutingDefaults() {
	r := &c.Routing
	setDefault(&r.Retry.MaxAttempts, DefaultMaxAttempts)
	setDefault(&r.Retry.BackoffBase, DefaultBackoffBase)
	setDefault(&r.Retry.BackoffMax, DefaultBackoffMax)
	setDefault(&r.Retry.Deadline, DefaultRetryDeadline)
	if r.FallbackOn == nil {
		r.FallbackOn = DefaultFallbackOn()
	}
	setDefault(&r.Circuit.Failures, DefaultCircuitFailures)
	setDefault(&r.Circuit.Window, DefaultCircuitWindow)
	setDefault(&r.Circuit.MinRequests, DefaultMinRequests)
	setDefault(&r.Circuit.Cooldown, DefaultCooldown)

	for i := range c.Models {
		m := &c.Models[i]
		setDefault(&m.Strategy, DefaultStrategy)
		setDefault(&m.Retry.MaxAttempts, r.Retry.MaxAttempts)
		setDefault(&m.Retry.BackoffBase, r.Retry.BackoffBase)
		setDefault(&m.Retry.BackoffMax, r.Retry.BackoffMax)
		setDefault(&m.Retry.Deadline, r.Retry.Deadline)
		if m.FallbackOn == nil {
			m.FallbackOn = append([]string{}, r.FallbackOn...)
		}
		setDefault(&m.Cache.Bill, DefaultCacheBill)
		for j := range m.Targets {
			setDefault(&m.Targets[j].Weight, DefaultWeight)
		}
	}
}

// routing checks the routing section and the routing fields of each model.
func (v *validator) routing(r *Routing, ms []Model) {
	byName := map[string]*Model{} // names and aliases
	for i := range ms {
		byName[ms[i].Name] = &ms[i]
	}
	aliases := map[string]string{}
	for i := range ms {
		m := &ms[i]
		p := fmt.Sprintf("models[%d]", i)
		if strings.Count(m.Name, "*") > 1 {
			v.addf(p+".name", "a wildcard route has one \"*\" (got %q)", m.Name)
		}
		for j, a := range m.Aliases {
			ap := fmt.Sprintf("%s.aliases[%d]", p, j)
			switch {
			case !v.required(ap, a):
			case IsWildcard(a):
				v.addf(ap, "an alias cannot be a wildcard (got %q)", a)
			case byName[a] != nil && byName[a] != m:
				v.addf(ap, "%q is already the name of another model", a)
			default:
				v.unique(aliases, ap, "alias", a)
			}
		}
		if len(m.Aliases) > 0 && IsWildcard(m.Name) {
			v.addf(p+".aliases", "a wildcard route cannot have aliases")
		}
	}
	for i := range ms {
		for _, a := range ms[i].Aliases {
			if _, ok := byName[a]; !ok {
				byName[a] = &ms[i]
			}
		}
	}
	v.retry("routing.retry", r.Retry)
	v.triggers("routing.fallback_on", r.FallbackOn)
	v.circuit(&r.Circuit)
	if r.DefaultFallback != "" {
		v.fallbackModel("routing.default_fallback", r.DefaultFallback, nil, byName)
	}
	for i := range ms {
		v.modelRouting(fmt.Sprintf("models[%d]", i), &ms[i], byName, r.DefaultFallback)
	}
}

// modelRouting checks one model's routing fields; byName resolves names and
// aliases, def is routing.default_fallback.
func (v *validator) modelRouting(p string, m *Model, byName map[string]*Model, def string) {
	v.oneOf(p+".strategy", "strategy", m.Strategy, Strategies()...)
	if len(m.Targets) > MaxTargets {
		v.addf(p+".targets", "at most %d targets (got %d)", MaxTargets, len(m.Targets))
	}
	for j, t := range m.Targets {
		tp := fmt.Sprintf("%s.targets[%d]", p, j)
		nonNegative(v, tp+".weight", t.Weight)
		nonNegative(v, tp+".rpm", t.RPM)
		nonNegative(v, tp+".tpm", t.TPM)
		for k, key := range t.APIKeys {
			if strings.TrimSpace(key) == "" {
				v.addf(fmt.Sprintf("%s.api_keys[%d]", tp, k), "empty (an unset ${VAR} expands to nothing)")
			}
		}
		if strings.Count(t.Model, "*") > 1 || IsWildcard(t.Model) && !IsWildcard(m.Name) {
			v.addf(tp+".model", "%q: a \"*\" may appear once, and only in a wildcard route's targets", t.Model)
		}
	}
	seen := map[string]string{}
	for j, f := range m.Fallbacks {
		fp := fmt.Sprintf("%s.fallbacks[%d]", p, j)
		if fm := v.fallbackModel(fp, f, m, byName); fm != nil {
			v.unique(seen, fp, "fallback", fm.Name)
		}
	}
	v.retry(p+".retry", m.Retry)
	v.triggers(p+".fallback_on", m.FallbackOn)
	if h := m.Hedge.After; h != "" && h != HedgeP95 {
		if d, err := time.ParseDuration(h); err != nil || d <= 0 {
			v.addf(p+".hedge.after", "%q is neither a positive duration nor %q", h, HedgeP95)
		}
	}
	if m.Hedge.After != "" && raceTargets(m, byName, def) < 2 {
		v.addf(p+".hedge.after", "nothing to race: the model has one target and no fallback with another")
	}
	v.duration(p+".cache.ttl", m.Cache.TTL)
	v.oneOf(p+".cache.bill", "bill", m.Cache.Bill, CacheBillZero, CacheBillFull)
}

// raceTargets counts the targets a hedge of m may use: its own, its
// fallbacks' and the default fallback's (when of m's type).
func raceTargets(m *Model, byName map[string]*Model, def string) int {
	n := len(m.Targets)
	for _, f := range m.Fallbacks {
		if fm := byName[f]; fm != nil && fm != m {
			n += len(fm.Targets)
		}
	}
	if dm := byName[def]; dm != nil && dm != m && typeOf(dm) == typeOf(m) && !slices.Contains(m.Fallbacks, def) {
		n += len(dm.Targets)
	}
	return n
}

// fallbackModel checks that name is a model (or alias) other than from, not
// a wildcard and of from's type, and returns it (nil when there is none).
func (v *validator) fallbackModel(path, name string, from *Model, byName map[string]*Model) *Model {
	fm := byName[name]
	switch {
	case IsWildcard(name):
		v.addf(path, "a fallback cannot be a wildcard route (got %q)", name)
	case fm == nil:
		v.addf(path, "unknown model %q", name)
	case from == nil:
		return fm
	case fm == from:
		v.addf(path, "a model cannot be its own fallback")
	case typeOf(fm) != typeOf(from):
		v.addf(path, "%q is a %s model, %s is %s", name, typeOf(fm), from.Name, typeOf(from))
	default:
		return fm
	}
	return nil
}

func typeOf(m *Model) string {
	if m.Type == "" {
		return DefaultModelType
	}
	return m.Type
}

func (v *validator) retry(p string, r Retry) {
	if r.MaxAttempts < 0 || r.MaxAttempts > MaxAttemptsLimit {
		v.addf(p+".max_attempts", "must be between 1 and %d (got %d)", MaxAttemptsLimit, r.MaxAttempts)
	}
	v.duration(p+".backoff_base", r.BackoffBase)
	v.duration(p+".backoff_max", r.BackoffMax)
	v.duration(p+".deadline", r.Deadline)
	if r.BackoffBase > 0 && r.BackoffMax > 0 && r.BackoffBase > r.BackoffMax {
		v.addf(p+".backoff_base", "%s is above backoff_max %s", r.BackoffBase, r.BackoffMax)
	}
}

func (v *validator) triggers(p string, ts []string) {
	all := Triggers()
	for i, t := range ts {
		v.oneOf(fmt.Sprintf("%s[%d]", p, i), "trigger", t, all...)
		if t == "" {
			v.addf(fmt.Sprintf("%s[%d]", p, i), "empty trigger (want %s)", orList(all))
		}
	}
}

func (v *validator) circuit(c *Circuit) {
	const p = "routing.circuit"
	if c.FailureRate < 0 || c.FailureRate > 1 {
		v.addf(p+".failure_rate", "must be between 0 and 1 (got %g)", c.FailureRate)
	}
	v.duration(p+".window", c.Window)
	nonNegative(v, p+".min_requests", c.MinRequests)
	v.duration(p+".cooldown", c.Cooldown)
}
