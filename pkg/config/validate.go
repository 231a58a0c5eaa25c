package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/providers/kind"
)

// MinHMACSecret is the shortest HMAC secret accepted, in bytes (256 bits,
// RFC 7518 section 3.2).
const MinHMACSecret = 32

// supportedAlgorithms lists the JWT signing algorithms an issuer may pin.
func supportedAlgorithms() []string {
	return []string{"HS256", "HS384", "HS512", "RS256", "ES256", "EdDSA"}
}

// Validate checks the whole configuration and returns every problem found,
// joined with errors.Join, or nil. Each problem starts with the key path it
// is about, e.g. `providers[1].kind: unknown kind "opnai" (want openai,
// azure, anthropic, gemini, bedrock or mock)`. Zero values that have a default are accepted, so Validate may run
// before or after ApplyDefaults. It does not read any file the config names.
func (c *Config) Validate() error {
	v := &validator{}
	v.listen(c.Listen)
	nonNegative(v, "body_limit", c.BodyLimit)
	v.duration("shutdown_grace", c.ShutdownGrace)
	v.duration("read_timeout", c.ReadTimeout)
	v.duration("idle_timeout", c.IdleTimeout)
	v.duration("write_timeout", c.WriteTimeout)
	nonNegative(v, "max_header_bytes", c.MaxHeaderBytes)
	v.oneOf("log.format", "format", c.Log.Format, "json", "text")
	v.oneOf("log.level", "level", c.Log.Level, "debug", "info", "warn", "error")
	v.auth(&c.Auth)
	v.console(&c.Console, &c.Auth)
	v.providers(c.Providers)
	v.filesProvider(c.FilesProvider, c.Providers)
	v.models(c.Models, c.Providers)
	v.batches(c.Models, c.FilesProvider)
	v.routing(&c.Routing, c.Models)
	v.modelNames = map[string]bool{}
	for _, m := range c.Models {
		v.modelNames[m.Name] = true
		for _, a := range m.Aliases {
			v.modelNames[a] = true
		}
	}
	v.priority(c.Priority)
	v.budgets(c.Budgets, c.Priority.LevelNames())
	v.rateLimits(c.RateLimits)
	if d := c.RateLimit.PresenceTTL; d != 0 && d < time.Second {
		v.addf("rate_limit.presence_ttl", "must be at least 1s (got %s)", d)
	}
	v.nats(&c.NATS)
	v.usage(&c.Usage)
	v.duration("budget.leases.ttl", c.Budget.Leases.TTL)
	v.duration("budget.leases.refill_wait", c.Budget.Leases.RefillWait)
	v.duration("budget.leases.first_grant_wait", c.Budget.Leases.FirstGrantWait)
	v.prices(c.Prices)
	return errors.Join(v.errs...)
}

// validator collects problems; each method checks one section.
type validator struct {
	errs       []error
	modelNames map[string]bool // model names and aliases, for references
}

func (v *validator) addf(path, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

func (v *validator) required(path, value string) bool {
	if strings.TrimSpace(value) == "" {
		v.addf(path, "required")
		return false
	}
	return true
}

// nonNegative reports a negative size or count.
func nonNegative[T int | int64](v *validator, path string, n T) {
	if n < 0 {
		v.addf(path, "must not be negative (got %d)", n)
	}
}

func (v *validator) duration(path string, d time.Duration) {
	if d < 0 {
		v.addf(path, "must not be negative (got %s)", d)
	}
}

// oneOf accepts "" (the field's default) or one of want.
func (v *validator) oneOf(path, what, got string, want ...string) {
	if got != "" && !slices.Contains(want, got) {
		v.addf(path, "unknown %s %q (want %s)", what, got, orList(want))
	}
}

// unique reports value as a duplicate when seen already holds it, else records it.
func (v *validator) unique(seen map[string]string, path, what, value string) {
	if first, ok := seen[value]; ok {
		v.addf(path, "duplicate %s %q (also %s)", what, value, first)
		return
	}
	seen[value] = path
}

func (v *validator) listen(addr string) {
	if addr == "" {
		return
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		v.addf("listen", "%q is not a host:port address", addr)
	}
}

func (v *validator) auth(a *Auth) {
	if a.CacheSize < -1 {
		v.addf("auth.cache_size", "must be -1 (disabled), 0 (default) or positive (got %d)", a.CacheSize)
	}
	names := map[string]string{}
	isses := map[string]string{}
	for i := range a.Issuers {
		is := &a.Issuers[i]
		p := fmt.Sprintf("auth.issuers[%d]", i)
		if v.required(p+".name", is.Name) {
			v.unique(names, p+".name", "issuer name", is.Name)
		}
		withDefaults := *is
		withDefaults.ApplyDefaults()
		if v.required(p+".issuer", withDefaults.Issuer) {
			v.unique(isses, p+".issuer", "issuer", withDefaults.Issuer)
		}
		v.duration(p+".leeway", is.Leeway)
		hmac, public := v.algorithms(p+".algorithms", is.Algorithms)
		remote := v.remoteKeys(p, is)
		if len(is.Keys) == 0 && is.JWKSFile == "" && !remote {
			v.addf(p, "needs at least one of keys, jwks_file, jwks_url or discovery_url")
		} else if is.JWKSFile == "" && !remote {
			v.keyless(p+".algorithms", is.Algorithms, is.Keys)
		}
		v.claimNames(p+".claims", is.Claims)
		for j, m := range is.ClaimMappings {
			mp := fmt.Sprintf("%s.claim_mappings[%d]", p, j)
			if v.required(mp+".claim", m.Claim) {
				if _, err := ParseClaimPath(m.Claim); err != nil {
					v.addf(mp+".claim", "%v", err)
				}
			}
			if m.Dept == "" && m.Team == "" && m.Project == "" {
				v.addf(mp, "sets none of dept, team, project")
			}
		}
		kids := map[string]string{}
		for j, k := range is.Keys {
			kp := fmt.Sprintf("%s.keys[%d]", p, j)
			if k.KID != "" {
				v.unique(kids, kp+".kid", "kid", k.KID)
			}
			v.key(kp, k, hmac, public)
		}
	}
}

// remoteKeys checks an issuer's discovery and JWKS URLs and refresh bounds
// and reports whether it fetches its keys.
func (v *validator) remoteKeys(p string, is *Issuer) bool {
	if is.DiscoveryURL == "" && is.JWKSURL == "" {
		return false
	}
	if is.DiscoveryURL != "" && is.JWKSURL != "" {
		v.addf(p, "sets discovery_url and jwks_url: want one")
	}
	for _, f := range []struct{ key, url string }{{"discovery_url", is.DiscoveryURL}, {"jwks_url", is.JWKSURL}} {
		if f.url == "" {
			continue
		}
		if err := CheckFetchURL(f.url, is.AllowHTTP); err != nil {
			v.addf(p+"."+f.key, "%v", err)
		}
	}
	v.duration(p+".jwks_refresh_min", is.JWKSRefreshMin)
	v.duration(p+".jwks_refresh_max", is.JWKSRefreshMax)
	if is.JWKSRefreshMax != 0 && is.JWKSRefreshMin > is.JWKSRefreshMax {
		v.addf(p+".jwks_refresh_min", "%s is above jwks_refresh_max %s", is.JWKSRefreshMin, is.JWKSRefreshMax)
	}
	return true
}

// algorithms checks an issuer's pinned algorithms and reports whether HMAC
// and public-key algorithms are among them.
func (v *validator) algorithms(path string, algs []string) (hmac, public bool) {
	supported := supportedAlgorithms()
	if len(algs) == 0 {
		v.addf(path, "required (one or more of %s)", orList(supported))
	}
	for _, alg := range algs {
		switch {
		case !slices.Contains(supported, alg):
			v.addf(path, "%q is not supported (want %s)", alg, orList(supported))
		case strings.HasPrefix(alg, "HS"):
			hmac = true
		default:
			public = true
		}
	}
	return hmac, public
}

// keyless reports pinned algorithms that none of keys can verify: the
// gateway refuses such an issuer at startup. (A JWKS file is only read then.)
func (v *validator) keyless(path string, algs []string, keys []Key) {
	var secret, public bool
	for _, k := range keys {
		secret = secret || k.Secret != "" || k.SecretFile != ""
		public = public || k.PublicKey != "" || k.PublicKeyFile != ""
	}
	for _, alg := range algs {
		if !slices.Contains(supportedAlgorithms(), alg) {
			continue
		}
		if strings.HasPrefix(alg, "HS") {
			if !secret {
				v.addf(path, "%s has no key (add one with secret or secret_file)", alg)
			}
		} else if !public {
			v.addf(path, "%s has no key (add one with public_key or public_key_file, or a jwks_file)", alg)
		}
	}
}

// key checks that exactly one key source is set and that the issuer pins an
// algorithm that can use it, so an HMAC secret never verifies an RS256 token
// or the reverse.
func (v *validator) key(path string, k Key, hmac, public bool) {
	var set []string
	for _, f := range []struct{ name, value string }{
		{"secret", k.Secret}, {"secret_file", k.SecretFile},
		{"public_key", k.PublicKey}, {"public_key_file", k.PublicKeyFile},
	} {
		if f.value != "" {
			set = append(set, f.name)
		}
	}
	switch {
	case len(set) == 0:
		v.addf(path, "no key material (set one of secret, secret_file, public_key or public_key_file; an unset ${VAR} expands to nothing)")
	case len(set) > 1:
		v.addf(path, "sets %s: want exactly one", strings.Join(set, " and "))
	case k.Secret != "" && len(k.Secret) < MinHMACSecret:
		v.addf(path+".secret", "shorter than %d bytes", MinHMACSecret)
	case strings.HasPrefix(set[0], "secret") && !hmac:
		v.addf(path+"."+set[0], "an HMAC secret needs an HS256, HS384 or HS512 algorithm on the issuer")
	case strings.HasPrefix(set[0], "public_key") && !public:
		v.addf(path+"."+set[0], "a public key needs an RS256, ES256 or EdDSA algorithm on the issuer")
	}
}

// claimNames rejects a principal field renamed onto a registered claim the
// JWT library checks itself, and two fields sharing one claim.
func (v *validator) claimNames(path string, n ClaimNames) {
	n = n.WithDefaults()
	seen := map[string]string{}
	for _, f := range []struct{ key, claim string }{
		{"subject", n.Subject}, {"key_id", n.KeyID}, {"dept", n.Dept}, {"team", n.Team},
		{"project", n.Project}, {"models", n.Models}, {"budgets", n.Budgets},
		{"rpm", n.RPM}, {"tpm", n.TPM}, {"admin", n.Admin}, {"priority", n.Priority},
	} {
		fp := path + "." + f.key
		if _, err := ParseClaimPath(f.claim); err != nil {
			v.addf(fp, "%v", err)
			continue
		}
		switch f.claim {
		case "iss", "aud", "exp", "nbf", "iat":
			v.addf(fp, "%q is a registered claim and cannot name a principal field", f.claim)
			continue
		}
		v.unique(seen, fp, "claim", f.claim)
	}
}

func (v *validator) providers(ps []Provider) {
	names := map[string]string{}
	for i := range ps {
		pr := &ps[i]
		p := fmt.Sprintf("providers[%d]", i)
		if v.required(p+".name", pr.Name) {
			v.unique(names, p+".name", "provider", pr.Name)
		}
		spec, ok := kind.Lookup(pr.Kind)
		switch {
		case ok:
			v.kindSettings(p, pr, spec)
		case pr.Kind == "":
			v.addf(p+".kind", "required (%s)", kind.List(nil))
		default:
			v.addf(p+".kind", "unknown kind %q (want %s)", pr.Kind, kind.List(nil))
		}
		if pr.Preset != "" && spec.Presets == nil {
			v.addf(p+".preset", "only kind %s takes a preset", kind.List(takesPresets))
		}
		v.duration(p+".timeouts.connect", pr.Timeouts.Connect)
		v.duration(p+".timeouts.first_byte", pr.Timeouts.FirstByte)
		v.duration(p+".timeouts.idle", pr.Timeouts.Idle)
		v.duration(p+".timeouts.total", pr.Timeouts.Total)
		nonNegative(v, p+".max_conns", pr.MaxConns)
		v.duration(p+".max_idle_conn_duration", pr.MaxIdleConnDuration)
		nonNegative(v, p+".max_response_body", pr.MaxResponseBody)
	}
}

// kindSettings checks the settings provider pr's kind reads, as its Spec
// states them.
func (v *validator) kindSettings(p string, pr *Provider, spec kind.Spec) {
	if spec.Region {
		v.required(p+".region", pr.Region)
	}
	switch spec.BaseURL {
	case kind.BaseURLRequired:
		v.baseURL(p+".base_url", pr.BaseURL)
	case kind.BaseURLUnlessPreset:
		if pr.Preset == "" || pr.BaseURL != "" {
			v.baseURL(p+".base_url", pr.BaseURL)
		}
	case kind.BaseURLOptional:
		if pr.BaseURL != "" {
			v.baseURL(p+".base_url", pr.BaseURL)
		}
	}
	if spec.APIVersion {
		v.required(p+".api_version", pr.APIVersion)
	}
	if pr.Preset != "" && spec.Presets != nil {
		v.oneOf(p+".preset", "preset", pr.Preset, spec.Presets...)
	}
	if pr.StreamUsage != "" && spec.StreamUsage {
		v.oneOf(p+".stream_usage", "stream_usage", pr.StreamUsage, "ask", "always", "never")
	}
}

// takesPresets reports whether a kind accepts a preset.
func takesPresets(s kind.Spec) bool { return s.Presets != nil }

// servesFiles reports whether a kind serves the OpenAI files and batches
// API.
func servesFiles(s kind.Spec) bool { return s.PassThrough }

func (v *validator) baseURL(path, raw string) {
	if !v.required(path, raw) {
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.addf(path, "%q is not an http or https URL", raw)
	}
}

func (v *validator) models(ms []Model, ps []Provider) {
	providers := make(map[string]bool, len(ps))
	for _, p := range ps {
		providers[p.Name] = true
	}
	names := map[string]string{}
	for i := range ms {
		m := &ms[i]
		p := fmt.Sprintf("models[%d]", i)
		if v.required(p+".name", m.Name) {
			v.unique(names, p+".name", "model", m.Name)
		}
		v.oneOf(p+".type", "type", m.Type, ModelTypes...)
		switch {
		case m.WildcardPattern == "":
		case !IsWildcard(m.Name):
			v.addf(p+".wildcard_pattern", "only a wildcard route (a name with \"*\") takes a pattern")
		default:
			if _, err := regexp.Compile(m.WildcardPattern); err != nil {
				v.addf(p+".wildcard_pattern", "not a regular expression: %v", err)
			}
		}
		if len(m.Targets) == 0 {
			v.addf(p+".targets", "required (at least one target)")
		}
		for j, t := range m.Targets {
			tp := fmt.Sprintf("%s.targets[%d].provider", p, j)
			if v.required(tp, t.Provider) && !providers[t.Provider] {
				v.addf(tp, "unknown provider %q", t.Provider)
			}
		}
	}
}

// priority checks the priority levels: unique names (in any case) and a
// default among them.
func (v *validator) priority(p Priority) {
	seen := map[string]string{}
	for i, l := range p.Levels {
		if l == "" {
			v.addf(fmt.Sprintf("priority.levels[%d]", i), "empty priority name")
			continue
		}
		v.unique(seen, fmt.Sprintf("priority.levels[%d]", i), "priority", strings.ToLower(l))
	}
	if p.Default != "" && !slices.Contains(p.LevelNames(), strings.ToLower(p.Default)) {
		v.addf("priority.default", "unknown priority %q (want %s)", p.Default, orList(p.LevelNames()))
	}
}

func (v *validator) budgets(bs []BudgetLimit, levels []string) {
	for i, b := range bs {
		p := fmt.Sprintf("budgets[%d]", i)
		v.scope(p+".scope", b.Scope, true)
		if b.Value == "" && b.Scope != "global" && b.Scope != "" {
			v.addf(p+".value", "required (a value of scope %s, or \"*\" for each value)", b.Scope)
		} else if err := CheckLimitValue(b.Scope, b.Value); err != nil {
			v.addf(p+".value", "%v", err)
		}
		if b.Period == "" {
			v.addf(p+".period", "required (day, month or total)")
		} else {
			v.oneOf(p+".period", "period", b.Period, "day", "month", "total")
		}
		if v.required(p+".amount_usd", b.AmountUSD) {
			v.decimal(p+".amount_usd", b.AmountUSD)
		}
		for j, d := range b.Degrade {
			dp := fmt.Sprintf("%s.degrade[%d]", p, j)
			if d.At <= 0 || d.At >= 1 {
				v.addf(dp+".at", "%v is not a fraction between 0 and 1 (the limit itself refuses at 1)", d.At)
			}
			if (d.Model == "") == !d.Refuse {
				v.addf(dp, "set exactly one of model or refuse")
			}
			if d.Model != "" && !v.modelNames[d.Model] {
				v.addf(dp+".model", "unknown model %q", d.Model)
			}
			for k, pr := range d.Priorities {
				if !slices.Contains(levels, strings.ToLower(pr)) {
					v.addf(fmt.Sprintf("%s.priorities[%d]", dp, k), "unknown priority %q (want %s; see priority.levels)", pr, orList(levels))
				}
			}
		}
	}
}

func (v *validator) rateLimits(rs []RateLimit) {
	for i, r := range rs {
		p := fmt.Sprintf("rate_limits[%d]", i)
		v.scope(p+".scope", r.Scope, false)
		nonNegative(v, p+".rpm", r.RPM)
		nonNegative(v, p+".tpm", r.TPM)
	}
}

func (v *validator) scope(path, scope string, global bool) {
	want := []string{"key", "subject", "team", "dept", "project"}
	if global {
		want = append(want, "global")
	}
	if scope == "" {
		v.addf(path, "required (%s)", orList(want))
		return
	}
	v.oneOf(path, "scope", scope, want...)
}

func (v *validator) nats(n *NATS) {
	if n.Replicas < 0 || n.Replicas > 5 {
		v.addf("nats.replicas", "must be between 1 and 5 (got %d)", n.Replicas)
	}
	v.duration("nats.max_age", n.MaxAge)
	v.duration("nats.duplicate_window", n.DuplicateWindow)
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		v.addf("nats.tls", "cert_file and key_file go together")
	}
}

func (v *validator) usage(u *Usage) {
	nonNegative(v, "usage.buffer", u.Buffer)
	nonNegative(v, "usage.spool_max_bytes", u.SpoolMaxBytes)
	nonNegative(v, "usage.batch_size", u.BatchSize)
	if u.BatchBytes < 0 || u.BatchBytes > MaxUsageBatchBytes {
		v.addf("usage.batch_bytes", "must be between 1 and %d (got %d)", MaxUsageBatchBytes, u.BatchBytes)
	}
	v.duration("usage.sync_interval", u.SyncInterval)
	v.oneOf("usage.unpriced_model", "value", u.UnpricedModel, UnpricedZero, UnpricedRefuse)
	v.oneOf("usage.compression", "value", u.Compression, CompressionS2, CompressionNone)
}

// filesProvider checks files_provider names a provider that speaks the
// OpenAI files and batches API.
func (v *validator) filesProvider(name string, ps []Provider) {
	if name == "" {
		return
	}
	for _, p := range ps {
		if p.Name != name {
			continue
		}
		if spec, ok := kind.Lookup(p.Kind); !ok || !servesFiles(spec) {
			v.addf("files_provider", "provider %q is of kind %s, which has no files or batches API (want %s)", name, p.Kind, kind.List(servesFiles))
		}
		return
	}
	v.addf("files_provider", "unknown provider %q", name)
}

func (v *validator) prices(ps map[string]Price) {
	for _, model := range sortedKeys(ps) {
		pr := ps[model]
		p := fmt.Sprintf("prices[%q]", model)
		if strings.TrimSpace(model) == "" {
			v.addf(p, "empty model name")
		}
		fields := []struct{ name, value string }{
			{"input", pr.Input}, {"output", pr.Output},
			{"cached_input", pr.CachedInput}, {"cache_write", pr.CacheWrite}, {"per_request", pr.PerRequest},
			{"per_image", pr.PerImage}, {"per_audio_second", pr.PerAudioSecond},
			{"per_1m_characters", pr.Per1MCharacters},
		}
		for _, k := range sortedKeys(pr.PerImageBy) {
			fields = append(fields, struct{ name, value string }{fmt.Sprintf("per_image_by[%q]", k), pr.PerImageBy[k]})
		}
		if !v.decimals(p, fields) {
			v.addf(p, "sets no price (input, output, cached_input, cache_write, per_request, per_image, per_image_by, per_audio_second or per_1m_characters)")
		}
		if len(pr.PerImageBy) > 0 {
			// The keys alone (the amounts are checked above).
			keys := make(map[string]string, len(pr.PerImageBy))
			for k := range pr.PerImageBy {
				keys[k] = "0"
			}
			if _, err := (pricing.Price{}).WithImagePrices(keys); err != nil {
				v.addf(p+".per_image_by", "%v", err)
			}
		}
		if l := pr.Long; l != nil {
			if l.AbovePromptTokens == 0 {
				v.addf(p+".long.above_prompt_tokens", "must be set and above 0 (the prompt size the tier starts above)")
			}
			if !v.decimals(p+".long", []struct{ name, value string }{
				{"input", l.Input}, {"output", l.Output}, {"cached_input", l.CachedInput}, {"cache_write", l.CacheWrite},
			}) {
				v.addf(p+".long", "sets no price (input, output, cached_input or cache_write)")
			}
		}
		if ts := pr.Tiers; ts != nil {
			for _, t := range []struct {
				name string
				p    *TierPrice
			}{{"flex", ts.Flex}, {"priority", ts.Priority}} {
				if t.p != nil && !v.decimals(p+".tiers."+t.name, []struct{ name, value string }{
					{"input", t.p.Input}, {"output", t.p.Output}, {"cached_input", t.p.CachedInput},
				}) {
					v.addf(p+".tiers."+t.name, "sets no price (input, output or cached_input)")
				}
			}
		}
	}
}

// decimals checks each set field under path as a decimal amount and
// reports whether any was set.
func (v *validator) decimals(path string, fields []struct{ name, value string }) bool {
	set := false
	for _, f := range fields {
		if f.value != "" {
			set = true
			v.decimal(path+"."+f.name, f.value)
		}
	}
	return set
}

// decimal accepts a non-negative decimal with at most 9 fractional digits
// (one nano-USD), e.g. "250", "12.50", "0.000000001".
func (v *validator) decimal(path, s string) {
	whole, frac, dot := strings.Cut(s, ".")
	ok := whole != "" && digits(whole) && (!dot || (frac != "" && digits(frac)))
	switch {
	case !ok:
		v.addf(path, "%q is not a decimal amount like 12.50", s)
	case len(frac) > 9:
		v.addf(path, "%q has more than 9 decimal places (finer than one nano-USD)", s)
	}
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// orList renders "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// batches checks the models that may run in batches: the files_provider
// runs them, so one of each model's targets must be on it under the
// model's own name.
func (v *validator) batches(ms []Model, files string) {
	for i, m := range ms {
		if !m.Batch {
			continue
		}
		p := fmt.Sprintf("models[%d].batch", i)
		if IsWildcard(m.Name) {
			v.addf(p, "a wildcard route cannot run in batches")
			continue
		}
		if files == "" {
			v.addf(p, "batches need a files_provider")
			continue
		}
		ok := false
		for _, t := range m.Targets {
			ok = ok || t.Provider == files && (t.Model == "" || t.Model == m.Name)
		}
		if !ok {
			v.addf(p, "the files_provider %s must serve %q under that name (a target on it without another model name)", files, m.Name)
		}
	}
}
