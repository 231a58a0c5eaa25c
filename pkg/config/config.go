// Package config defines Tollgate's YAML configuration: its types, defaults,
// ${ENV_VAR} expansion and validation. Every program reads the same file.
package config

import (
	"time"
)

// Config is the root of the YAML file. Zero values are replaced by the
// defaults documented on each field when the file is loaded.
type Config struct {
	// Listen is the public listener address. Default 127.0.0.1:8080; the
	// TOLLGATE_LISTEN environment variable overrides it.
	Listen string `yaml:"listen"`
	// BodyLimit is the largest request body accepted, in bytes. Default 8 MiB.
	// Larger bodies are answered with 413.
	BodyLimit int `yaml:"body_limit"`
	// ShutdownGrace bounds how long in-flight requests and streams may run
	// after SIGTERM before the process exits. Default 30s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// ReadTimeout bounds reading one client request (headers and body), so a
	// slow client cannot hold a connection forever. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// IdleTimeout closes keep-alive client connections idle this long. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WriteTimeout bounds writing to a client that does not read: a
	// non-stream answer must be written within it, and each event of a
	// stream too, so a client that stops reading a stream is disconnected
	// (and the upstream call cancelled) after this long. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxHeaderBytes bounds the request line and headers of a client
	// request, in bytes (431 above); it is also the per-connection read
	// buffer. Default 8 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes"`

	Log       Log        `yaml:"log"`
	Admin     Admin      `yaml:"admin"`
	Profiling Profiling  `yaml:"profiling"`
	Tracing   Tracing    `yaml:"tracing"`
	Auth      Auth       `yaml:"auth"`
	Providers []Provider `yaml:"providers"`
	// FilesProvider names the provider that serves /v1/files and
	// /v1/batches, which name no model (kind openai, azure or mock). Empty
	// disables those endpoints (they answer 400).
	FilesProvider string  `yaml:"files_provider"`
	Models        []Model `yaml:"models"`
	// Routing configures retries, fallbacks and circuit breaking.
	Routing Routing `yaml:"routing"`

	// Budgets are spend limits; every applicable limit must have headroom.
	Budgets []BudgetLimit `yaml:"budgets"`
	// BudgetOvercommit allows a child scope's limits to sum above its
	// parent's (dept > team > project > subject > key). Default false.
	BudgetOvercommit bool `yaml:"budget_overcommit"`
	// Budget configures how the gateways enforce Budgets together.
	Budget Budget `yaml:"budget"`
	// Priority names the request priorities the degradation ladder tells
	// apart, and where a request's priority comes from.
	Priority Priority `yaml:"priority"`
	// RateLimits are per-principal request and token rates.
	RateLimits []RateLimit `yaml:"rate_limits"`
	// RateLimit configures how the gateways enforce RateLimits and the
	// tokens' rpm/tpm claims together.
	RateLimit RateLimiting `yaml:"rate_limit"`
	NATS      NATS         `yaml:"nats"`
	Usage     Usage        `yaml:"usage"`
	// PriceBook is a price table file in the prices.yaml format, as
	// `tollctl prices import` writes it, that replaces the embedded table;
	// its version is recorded on every usage event. Read at start and on
	// every reload; a relative path is relative to the working directory.
	// Empty (default) uses the embedded table.
	PriceBook string `yaml:"price_book"`
	// Prices override or add entries of the price table (the price book,
	// else the embedded table), keyed by model, or by provider name and
	// model ("azure-eu/gpt-4o"): such an entry prices that model when that
	// provider serves it, before the model's own entry.
	Prices map[string]Price `yaml:"prices"`
}

// Budget configures budget enforcement in the gateway.
type Budget struct {
	// Leases make every limit hold across all gateways sharing one NATS:
	// each gateway spends a slice of a limit's headroom drawn through KV
	// compare-and-set (README: budgets across gateways).
	Leases BudgetLeases `yaml:"leases"`
}

// BudgetLeases configures budget leases. Zero values take the defaults
// shown.
type BudgetLeases struct {
	// Disabled turns leases off: each gateway then checks limits against
	// the applied totals and its own reservations only, so N gateways may
	// overshoot a limit by what the others have in flight. Default false.
	Disabled bool `yaml:"disabled"`
	// TTL is how long a gateway's slice stays valid without renewal; a
	// dead gateway's slices return to the others after it. Default 30s.
	TTL time.Duration `yaml:"ttl"`
	// MaxSliceUSD caps the headroom one refill draws, a decimal string
	// ("0.50"). Default "": no cap.
	MaxSliceUSD string `yaml:"max_slice_usd"`
	// RefillWait bounds how long a request that does not fit its gateway's
	// slice waits for a refill before it is refused. Default 50ms.
	RefillWait time.Duration `yaml:"refill_wait"`
	// FirstGrantWait bounds the wait of the first request on a limited
	// total this gateway holds no slice of. Default 1s.
	FirstGrantWait time.Duration `yaml:"first_grant_wait"`
}

// BudgetLimit is one spend limit: (scope, value or *, amount, period).
type BudgetLimit struct {
	// Scope is key, subject, team, dept, project or global.
	Scope string `yaml:"scope"`
	// Value is the scope value the limit applies to, or "*" for each value
	// separately (every dept gets its own limit of Amount). Team and
	// project values name their department: "research/ml", or "*/ml" for
	// ml of every department (CheckLimitValue).
	Value string `yaml:"value"`
	// AmountUSD is a decimal string ("250", "12.50"), parsed exactly into
	// nano-USD; never a float.
	AmountUSD string `yaml:"amount_usd"`
	// Period is day or month (UTC calendar) or total.
	Period string `yaml:"period"`
	// Degrade is the degradation ladder of this limit: steps taken as its
	// spend grows, before it refuses everything at 100%.
	Degrade []DegradeStep `yaml:"degrade"`
}

// DegradeStep applies once a limit's spend (with reservations) reaches At
// of the amount, to requests whose priority (see Priority) is in
// Priorities (names of priority.levels, any case; empty Priorities means
// every request). It either serves them with a cheaper
// Model or refuses them (429 budget_degraded). Each step taken is recorded
// in the usage event and published once per period as an alert.
type DegradeStep struct {
	At         float64  `yaml:"at"`
	Priorities []string `yaml:"priorities"`
	Model      string   `yaml:"model"`
	Refuse     bool     `yaml:"refuse"`
}

// Priority configures request priorities (issue 41, finding 9). A
// request's priority comes from its principal, never from the client
// alone: the token's priority claim (claims.priority) or the API key's
// priority, else Default. The x-tollgate-priority header may lower it to a
// later level and never raise it: a header naming a higher level than the
// principal's is served at the principal's. Names compare
// case-insensitively; a header or claim naming no level is refused (400
// invalid_priority, 401 for the claim).
type Priority struct {
	// Levels are the priority names, highest first. Default interactive,
	// background, batch.
	Levels []string `yaml:"levels"`
	// Default is the priority of a principal that carries none. Default
	// the first level.
	Default string `yaml:"default"`
}

// RateLimit caps requests and tokens per minute for one scope value.
type RateLimit struct {
	Scope string `yaml:"scope"` // key, subject, team, dept, project
	Value string `yaml:"value"` // or "*"
	RPM   int64  `yaml:"rpm"`   // requests per minute, 0 = none
	TPM   int64  `yaml:"tpm"`   // tokens per minute, 0 = none
}

// RateLimiting configures rate limits across gateways. Zero values take the
// defaults shown.
type RateLimiting struct {
	// Local makes every gateway enforce each rpm/tpm limit alone, so N
	// gateways allow up to N times the limit. Default false: the gateways
	// sharing one NATS announce themselves in a KV bucket, and each
	// enforces limit/N with N the live gateways it sees (README: rate
	// limits across gateways).
	Local bool `yaml:"local"`
	// PresenceTTL is how long a gateway counts as live after its last
	// announcement (renewed every third of it): a gateway that dies gives
	// its share back within PresenceTTL plus a third. Default 15s, at
	// least 1s.
	PresenceTTL time.Duration `yaml:"presence_ttl"`
}

// NATS says where the usage stream and the spend bucket live.
type NATS struct {
	// URL of the NATS servers (comma-separated). Ignored with --embed.
	URL       string `yaml:"url"`
	CredsFile string `yaml:"creds_file"`
	NKeyFile  string `yaml:"nkey_file"`
	TLS       TLS    `yaml:"tls"`
	// Replicas for the stream and KV bucket. Default 1 (3 in a cluster).
	Replicas int `yaml:"replicas"`
	// MaxAge of usage events in the stream. Default 400 days.
	MaxAge time.Duration `yaml:"max_age"`
	// DuplicateWindow of the stream's Nats-Msg-Id dedupe. Default 2m.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
}

// TLS holds client TLS files; all empty means plain TCP.
type TLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Usage configures the usage-event publisher inside the gateway.
type Usage struct {
	// SpoolDir holds events that could not reach NATS. Default ./data/spool.
	SpoolDir string `yaml:"spool_dir"`
	// Buffer is the in-memory queue in events. Default 65536.
	Buffer int `yaml:"buffer"`
	// BatchSize is the most events one batch (one stream message) carries.
	// Default 256.
	BatchSize int `yaml:"batch_size"`
	// BatchBytes is the most bytes one encoded batch takes, lowered at
	// start to fit the NATS server's max_payload (1 MiB by default).
	// Default 262144 (256 KiB), at most 4 MiB.
	BatchBytes int `yaml:"batch_bytes"`
	// SpoolMaxBytes bounds the spool. Default 1 GiB.
	SpoolMaxBytes int64 `yaml:"spool_max_bytes"`
	// SyncInterval is the spool fsync interval: the most a SIGKILL can lose. Default 100ms.
	SyncInterval time.Duration `yaml:"sync_interval"`
	// FlushDelay is how long the publisher may hold a batch open after its
	// first event while more arrive, so that they share one message and
	// one ack (usage events only; no request waits on it): the batch
	// leaves with the first event that ends FlushDelay or more after its
	// first, or twice FlushDelay after its first when none comes. 0 takes
	// the default, 20ms; a negative value (e.g. -1ms) never holds a batch
	// open.
	FlushDelay time.Duration `yaml:"flush_delay"`
	// FailClosed answers 503 when buffer and spool are both full; false
	// serves the request and counts the lost event. Default false.
	FailClosed bool `yaml:"fail_closed"`
	// Compression is how batches are written to the stream and the spool:
	// "s2" (default: about a quarter of the bytes) or "none". Readers
	// older than compression refuse compressed batches: upgrade the budget
	// and analytics services and tollctl before the gateways.
	Compression string `yaml:"compression"`
	// UnpricedModel is what a model with no price does: "zero" (bill 0 and
	// count it in a metric, default) or "refuse" (answer 400).
	UnpricedModel string `yaml:"unpriced_model"`
}

// Price is a config override of one price-table entry, as decimal USD
// strings: input, output, cached_input and cache_write per million tokens,
// per_request per call, per_image per generated image, per_audio_second
// per second of audio, per_1m_characters per million characters of speech
// input. PerImageBy prices the image sizes and qualities that do not cost
// per_image, keyed "quality/size" with "*" for any one of them
// ("hd/1024x1792", "*/1792x1024", "hd/*"; pricing.Price.ImagePrice says
// which applies). cache_write is the price of prompt tokens written to the
// provider's prompt cache (Anthropic's cache_creation_input_tokens); empty
// bills them at input. Long is a long-context tier, Tiers the prices of
// the provider's service tiers.
type Price struct {
	Input           string            `yaml:"input"`
	Output          string            `yaml:"output"`
	CachedInput     string            `yaml:"cached_input"`
	CacheWrite      string            `yaml:"cache_write"`
	PerRequest      string            `yaml:"per_request"`
	PerImage        string            `yaml:"per_image"`
	PerImageBy      map[string]string `yaml:"per_image_by"`
	PerAudioSecond  string            `yaml:"per_audio_second"`
	Per1MCharacters string            `yaml:"per_1m_characters"`
	Long            *LongPrice        `yaml:"long"`
	Tiers           *Tiers            `yaml:"tiers"`
}

// Tiers are the prices of a provider's service tiers (OpenAI
// service_tier): a request the provider reports it answered at flex or
// priority pays that tier's prices; a tier left out, or a field left
// empty, keeps the entry's base price.
type Tiers struct {
	Flex     *TierPrice `yaml:"flex"`
	Priority *TierPrice `yaml:"priority"`
}

// TierPrice is one service tier's token prices, decimal USD per million
// tokens.
type TierPrice struct {
	Input       string `yaml:"input"`
	Output      string `yaml:"output"`
	CachedInput string `yaml:"cached_input"`
}

// LongPrice is a long-context price tier: a request whose prompt has more
// than AbovePromptTokens tokens (required, above 0) pays these prices,
// decimal USD per million tokens, for all its tokens; an empty field keeps
// the entry's base price.
type LongPrice struct {
	AbovePromptTokens uint64 `yaml:"above_prompt_tokens"`
	Input             string `yaml:"input"`
	Output            string `yaml:"output"`
	CachedInput       string `yaml:"cached_input"`
	CacheWrite        string `yaml:"cache_write"`
}

// Log configures log/slog output (always to stderr).
type Log struct {
	// Format is "json" (default) or "text".
	Format string `yaml:"format"`
	// Level is debug, info (default), warn or error.
	Level string `yaml:"level"`
	// Requests logs one line per request at info level. Default false.
	Requests bool `yaml:"requests"`
}

// Auth lists the JWT issuers whose tokens are accepted.
type Auth struct {
	Issuers []Issuer `yaml:"issuers"`
	// CacheSize is the number of verified tokens kept so a repeated token
	// skips the signature check (exp and nbf are still checked on every
	// request). Default 65536; 0 keeps the default, -1 disables the cache.
	CacheSize int `yaml:"cache_size"`
	// AllowQueryKey accepts a token or API key in the "key" query parameter
	// of the Gemini endpoints (/v1beta/models/...), as Google's API does.
	// Default false: a key in a URL ends up in the logs of every proxy on
	// the way, so only the x-goog-api-key and Authorization headers are
	// read. The gateway never logs the query either way.
	AllowQueryKey bool `yaml:"allow_query_key"`
}

// Issuer is one trusted token issuer with pinned algorithms and keys.
type Issuer struct {
	// Name identifies the issuer in logs and errors.
	Name string `yaml:"name"`
	// Issuer is the expected `iss` claim; tokens are matched to an issuer by it.
	Issuer string `yaml:"issuer"`
	// Audience, when set, must appear in the token's `aud` claim.
	Audience string `yaml:"audience"`
	// Algorithms pinned for this issuer: HS256, HS384, HS512, RS256, ES256, EdDSA.
	// Tokens signed with anything else are rejected. Required.
	Algorithms []string `yaml:"algorithms"`
	// Leeway tolerated on exp/nbf/iat. Default 30s.
	Leeway time.Duration `yaml:"leeway"`
	// Keys verify signatures; a key with a kid only verifies tokens with that kid.
	Keys []Key `yaml:"keys"`
	// JWKSFile is a JSON Web Key Set file whose keys are added to Keys. With
	// DiscoveryURL or JWKSURL it is the fallback: its keys serve until the
	// first successful fetch replaces them.
	JWKSFile string `yaml:"jwks_file"`
	// DiscoveryURL is the identity provider's OpenID configuration
	// (".../.well-known/openid-configuration"); its issuer and jwks_uri are
	// used. When Issuer is empty it defaults to DiscoveryURL without that
	// suffix, which is what the document's issuer must equal (OpenID Connect
	// Discovery 1.0, section 4.3).
	DiscoveryURL string `yaml:"discovery_url"`
	// JWKSURL is a JSON Web Key Set fetched directly, without discovery.
	JWKSURL string `yaml:"jwks_url"`
	// JWKSRefreshMin and JWKSRefreshMax bound how often fetched keys are
	// refreshed: the response's Cache-Control max-age, clamped to
	// [min, max], or max without one. A token with an unknown kid triggers
	// a refetch at most once per JWKSRefreshMin. Defaults 1m and 1h.
	JWKSRefreshMin time.Duration `yaml:"jwks_refresh_min"`
	JWKSRefreshMax time.Duration `yaml:"jwks_refresh_max"`
	// AllowHTTP permits plain http:// discovery and JWKS URLs off loopback.
	// Default false: only https://, or http:// to a loopback address.
	AllowHTTP bool `yaml:"allow_http"`
	// Claims renames the claims a principal is built from.
	Claims ClaimNames `yaml:"claims"`
	// ClaimMappings derive dept, team and project from other claims, such as
	// a group or a role. See ClaimMapping for the order rules apply in.
	ClaimMappings []ClaimMapping `yaml:"claim_mappings"`
	// ClaimDefaults are the dept, team and project of a token that neither
	// carries them nor matches a mapping. Default empty.
	ClaimDefaults ClaimDefaults `yaml:"claim_defaults"`
}

// ClaimMapping maps one claim value to principal fields: a token whose claim
// at path Claim equals Value (a string claim) or contains it (an array of
// strings) gets the Dept, Team and Project the rule sets. Each field is
// taken, in this order, from its own claim (claims.dept, ...) when that is a
// non-empty string, else from the first matching rule in table order that
// sets the field, else from ClaimDefaults.
type ClaimMapping struct {
	// Claim is a claim path, in the syntax of ClaimNames.
	Claim   string `yaml:"claim"`
	Value   string `yaml:"value"`
	Dept    string `yaml:"dept"`
	Team    string `yaml:"team"`
	Project string `yaml:"project"`
}

// ClaimDefaults are principal fields used when no claim or mapping sets them.
type ClaimDefaults struct {
	Dept    string `yaml:"dept"`
	Team    string `yaml:"team"`
	Project string `yaml:"project"`
}

// Key is one verification key: exactly one of Secret, SecretFile,
// PublicKey or PublicKeyFile is set.
type Key struct {
	KID string `yaml:"kid"`
	// Secret is an HMAC secret (HS* algorithms).
	Secret     string `yaml:"secret"`
	SecretFile string `yaml:"secret_file"`
	// PublicKey is a PEM public key (RSA, ECDSA P-256 or Ed25519).
	PublicKey     string `yaml:"public_key"`
	PublicKeyFile string `yaml:"public_key_file"`
}

// ClaimNames maps principal fields to claim paths. Empty fields take the
// defaults shown. A path not starting with "/" is one top-level claim name,
// taken literally, dots and slashes included ("https://corp.example/dept").
// A path starting with "/" is a JSON Pointer (RFC 6901) into the claims:
// "/realm_access/roles" is the roles member of the realm_access object; "~1"
// stands for "/" and "~0" for "~" inside a segment, so
// "/https:~1~1corp.example~1org/dept" is the dept member of the object
// claim "https://corp.example/org". Segments name object members only.
type ClaimNames struct {
	Subject string `yaml:"subject"` // sub
	KeyID   string `yaml:"key_id"`  // jti
	Dept    string `yaml:"dept"`    // dept
	Team    string `yaml:"team"`    // team
	Project string `yaml:"project"` // project
	Models  string `yaml:"models"`  // models
	Budgets string `yaml:"budgets"` // budgets
	RPM     string `yaml:"rpm"`     // rpm
	TPM     string `yaml:"tpm"`     // tpm
	Admin   string `yaml:"admin"`   // admin
	// Priority is the claim of the principal's highest request priority
	// (see Priority).
	Priority string `yaml:"priority"` // priority
}

// Provider is one upstream API endpoint with its credentials and timeouts.
type Provider struct {
	// Name is how models refer to this provider.
	Name string `yaml:"name"`
	// Kind is the wire protocol: "openai" (any OpenAI-compatible server),
	// "azure" (Azure OpenAI), "anthropic", "gemini", "bedrock", or "mock"
	// (the built-in mock upstream, started in-process on loopback).
	Kind string `yaml:"kind"`
	// Preset selects a known OpenAI-compatible server for kind openai
	// (openai, vllm, ollama, lmstudio, llamacpp, groq, together, fireworks,
	// deepseek, mistral, openrouter, xai, perplexity, cerebras): its base URL
	// and quirks.
	Preset string `yaml:"preset"`
	// BaseURL is the API root, e.g. https://api.openai.com/v1. Required for
	// kind openai without a preset and for azure; anthropic, gemini and
	// bedrock default to the public endpoints. Not used by kind mock.
	BaseURL string `yaml:"base_url"`
	// APIVersion is Azure's api-version, or Anthropic's anthropic-version
	// header (default 2023-06-01).
	APIVersion string `yaml:"api_version"`
	// StreamUsage overrides how an OpenAI-compatible server reports stream
	// usage: ask (send stream_options.include_usage), always, never.
	StreamUsage string `yaml:"stream_usage"`
	// Headers are extra static headers sent on every upstream request.
	Headers map[string]string `yaml:"headers"`
	// Region, AccessKeyID, SecretAccessKey and SessionToken are Bedrock's
	// AWS settings (credentials usually "${AWS_ACCESS_KEY_ID}" and so on).
	Region          string `yaml:"region"`
	AccessKeyID     string `yaml:"access_key_id"`
	SecretAccessKey string `yaml:"secret_access_key"`
	SessionToken    string `yaml:"session_token"`
	// APIKey is sent as a bearer token. Usually "${OPENAI_API_KEY}"; when it
	// expands to nothing, requests routed here get 503 naming APIKeyEnv.
	APIKey string `yaml:"api_key"`
	// APIKeyEnv is filled by Load with the variable APIKey referenced, so an
	// error can name it without ever showing a key.
	APIKeyEnv string `yaml:"-"`
	// Timeouts bound each phase of an upstream call.
	Timeouts Timeouts `yaml:"timeouts"`
	// MaxConns caps open connections to this provider. Default 4096.
	MaxConns int `yaml:"max_conns"`
	// MaxIdleConnDuration closes pooled connections idle this long. Default 30s.
	MaxIdleConnDuration time.Duration `yaml:"max_idle_conn_duration"`
	// MaxResponseBody bounds a non-stream response body in bytes. Default 64 MiB.
	MaxResponseBody int `yaml:"max_response_body"`
}

// Timeouts bound the phases of one upstream call.
type Timeouts struct {
	// Connect bounds dialing (TCP and TLS). Default 5s.
	Connect time.Duration `yaml:"connect"`
	// FirstByte bounds the wait for the response header of a streamed call.
	// Expiry answers 504. Default 60s.
	FirstByte time.Duration `yaml:"first_byte"`
	// Idle bounds the gap between two reads of a streamed body. Expiry ends
	// the stream with an SSE error event. Default 60s.
	Idle time.Duration `yaml:"idle"`
	// Total bounds the whole call, non-stream and stream. Default 10m.
	Total time.Duration `yaml:"total"`
}

// Model is a name clients ask for and where it is served.
type Model struct {
	// Name is the `model` value clients send. A name with one "*" is a
	// wildcard route: "openai/*" serves "openai/gpt-4o", passing "gpt-4o"
	// upstream. Exact names and aliases win over wildcards; among
	// wildcards the longest pattern wins.
	Name string `yaml:"name"`
	// WildcardPattern, on a wildcard route only, is the regular expression
	// (Go RE2 syntax, matched against the whole part the "*" stands for)
	// that a requested name must fit to be passed upstream; a name that
	// does not fit is refused with 400 invalid_model_name before any
	// upstream call. Default DefaultWildcardPattern: "/"-separated
	// segments of letters, digits and . _ - : @ +, each starting with a
	// letter or digit. Names over 256 bytes, with control characters or
	// not UTF-8 are refused whatever the pattern.
	WildcardPattern string `yaml:"wildcard_pattern"`
	// Type is the kind of endpoint the model serves, and only that kind:
	// "chat" (default; chat, completions, the Responses API and the
	// Messages API), "embeddings", "image" (/v1/images/generations),
	// "speech" (/v1/audio/speech), "transcription"
	// (/v1/audio/transcriptions and /v1/audio/translations) or
	// "moderation" (/v1/moderations). A request for a model on another
	// kind of endpoint is 400 wrong_endpoint (issue 41, finding 10).
	Type string `yaml:"type"`
	// Aliases are other names clients may send for this model.
	Aliases []string `yaml:"aliases"`
	// Targets serve the model, chosen by Strategy.
	Targets []Target `yaml:"targets"`
	// Strategy picks among the targets: weighted (default; equal weights
	// unless set), round_robin, least_inflight, latency or ordered.
	Strategy string `yaml:"strategy"`
	// Fallbacks are models (names or aliases) tried in order after this
	// model's targets failed with a FallbackOn failure. Their own
	// fallbacks are not followed. Default none.
	Fallbacks []string `yaml:"fallbacks"`
	// Retry overrides routing.retry for requests to this model; zero fields
	// take the routing value.
	Retry Retry `yaml:"retry"`
	// FallbackOn overrides routing.fallback_on for requests to this model.
	FallbackOn []string `yaml:"fallback_on"`
	// Hedge starts a second call when the first is slow. Default off.
	Hedge Hedge `yaml:"hedge"`
	// Cache serves repeated identical requests from the response cache.
	// Default off.
	Cache ModelCache `yaml:"cache"`
	// Batch lets tokens allowed this model run it in batches (POST
	// /v1/batches, issue #41). Default false: a batch whose input file
	// names the model is refused with 403 batch_not_enabled. The model
	// needs a target on the files_provider that calls it by its own name,
	// since the provider runs the batch's lines as written; a batch is
	// checked line by line and reserved against budgets before the
	// provider sees it, and billed at that estimate.
	Batch bool `yaml:"batch"`
}

// Target is one provider serving a model under its own name.
type Target struct {
	Provider string `yaml:"provider"`
	// Model is the upstream model name; default the Model's Name, or "*"
	// in a wildcard route, where "*" stands for the part of the requested
	// name the route's "*" matched.
	Model string `yaml:"model"`
	// Weight is the target's share of requests under the weighted
	// strategy, relative to the other targets. Default 1.
	Weight int `yaml:"weight"`
	// RPM and TPM cap the requests and tokens per minute this gateway
	// sends to the target; a target at its cap is skipped, never queued.
	// 0 (default): no cap.
	RPM int64 `yaml:"rpm"`
	TPM int64 `yaml:"tpm"`
	// APIKeys, when set, replace the provider's api_key for this target and
	// are used in rotation, one per call.
	APIKeys []string `yaml:"api_keys"`
}
