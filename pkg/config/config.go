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
	// stream too. A client that stops reading a stream is disconnected
	// after this long: its upstream call is cancelled, a warning is logged
	// and the usage event records 499 client_write_timeout. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxHeaderBytes bounds the request line and headers of a client
	// request, in bytes (431 above); it is also the per-connection read
	// buffer. Default 8 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes"`

	// Log configures the log lines the gateway, budget and analytics
	// programs write to stderr.
	Log Log `yaml:"log"`
	// Admin configures the admin listener: health, metrics, pprof, the
	// admin API and the console.
	Admin Admin `yaml:"admin"`
	// Console configures the web console on the admin listener.
	Console Console `yaml:"console"`
	// Profiling configures continuous profiling with Pyroscope.
	Profiling Profiling `yaml:"profiling"`
	// Tracing configures OpenTelemetry traces.
	Tracing Tracing `yaml:"tracing"`
	// Auth lists the JWT issuers whose tokens the gateway accepts.
	Auth Auth `yaml:"auth"`
	// Providers are the upstream APIs models are served by: one entry per
	// endpoint and credential.
	Providers []Provider `yaml:"providers"`
	// FilesProvider names the provider that serves /v1/files and
	// /v1/batches, which name no model. It must be of kind openai, azure
	// or mock. Empty (default) disables those endpoints: they answer 400
	// files_not_configured.
	FilesProvider string `yaml:"files_provider"`
	// Models are the names clients may ask for, and where each is served.
	Models []Model `yaml:"models"`
	// Routing configures retries, fallbacks and circuit breaking.
	Routing Routing `yaml:"routing"`

	// Budgets are spend limits. A request is served only when every limit
	// that applies to it has headroom; otherwise it gets 429
	// budget_exceeded. Limits also come from the tokens' budgets claim.
	Budgets []BudgetLimit `yaml:"budgets"`
	// BudgetOvercommit allows a child scope's limits to sum above its
	// parent's (dept > team > project > subject > key). Default false: a
	// config whose child limits sum above the parent's is refused.
	BudgetOvercommit bool `yaml:"budget_overcommit"`
	// Budget configures how the gateways enforce budgets together.
	Budget Budget `yaml:"budget"`
	// Priority names the request priorities the degradation ladder tells
	// apart, and where a request's priority comes from.
	Priority Priority `yaml:"priority"`
	// RateLimits are per-principal request and token rates.
	RateLimits []RateLimit `yaml:"rate_limits"`
	// RateLimit configures how the gateways enforce rate_limits and the
	// tokens' rpm/tpm claims together.
	RateLimit RateLimiting `yaml:"rate_limit"`
	// NATS says where the usage stream and the KV buckets live.
	NATS NATS `yaml:"nats"`
	// ClickHouse describes the analytics database's layout (its address
	// and credentials are the analytics service's flags and environment).
	ClickHouse ClickHouse `yaml:"clickhouse"`
	// Usage configures the gateway's usage-event publisher and its spool.
	Usage Usage `yaml:"usage"`
	// PriceBook is a price table file in the prices.yaml format, as
	// `tollctl prices import` writes it, that replaces the embedded table;
	// its version is recorded on every usage event. Read at start and on
	// every reload; a relative path is relative to the working directory.
	// Empty (default) uses the embedded table (pkg/pricing/prices.yaml).
	PriceBook string `yaml:"price_book"`
	// Prices override or add entries of the price table (the price book,
	// else the embedded table), keyed by model, or by provider name and
	// model ("azure-eu/gpt-4o"): such an entry prices that model when that
	// provider serves it, before the model's own entry. An entry replaces
	// the table's whole entry for its model. The keys "/v1/files" and
	// "/v1/batches" price those endpoints per request. All prices are
	// decimal strings of USD, read exactly into nano-USD.
	Prices map[string]Price `yaml:"prices"`
}

// Budget configures budget enforcement in the gateway.
type Budget struct {
	// Leases make every limit hold across all gateways sharing one NATS:
	// each gateway spends a slice of a limit's headroom drawn through KV
	// compare-and-set (docs/budgets.md: budgets across gateways).
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
	// MaxSliceUSD caps the headroom one refill draws, a decimal string of
	// USD ("0.50"). Default none: no cap, so one gateway alone may hold a
	// limit's whole headroom.
	MaxSliceUSD string `yaml:"max_slice_usd"`
	// RefillWait bounds how long a request that does not fit its gateway's
	// slice waits for a refill before it is refused with 429. Default 50ms.
	RefillWait time.Duration `yaml:"refill_wait"`
	// FirstGrantWait bounds the wait of the first request on a limited
	// total this gateway holds no slice of. Default 1s.
	FirstGrantWait time.Duration `yaml:"first_grant_wait"`
}

// BudgetLimit is one spend limit: (scope, value or *, amount, period).
type BudgetLimit struct {
	// Scope is what the limit applies to: key, subject, team, dept, project
	// or global. Required.
	Scope string `yaml:"scope"`
	// Value is the scope value the limit applies to, or "*" for each value
	// separately (every dept gets its own limit of amount_usd). Team and
	// project values name their department: "research/ml", or "*/ml" for
	// ml of every department (docs/budgets.md: teams and projects by department).
	// Required unless the scope is global.
	Value string `yaml:"value"`
	// AmountUSD is the limit in USD, a decimal string ("250", "12.50"),
	// parsed exactly into nano-USD, never through a float. Required.
	AmountUSD string `yaml:"amount_usd"`
	// Period is day or month (UTC calendar) or total. Required.
	Period string `yaml:"period"`
	// Degrade is the degradation ladder of this limit: steps taken as its
	// spend grows, before it refuses everything at 100%.
	Degrade []DegradeStep `yaml:"degrade"`
}

// DegradeStep is one step of a limit's degradation ladder. It applies
// once the limit's spend (with reservations) reaches the share at of the amount, to
// requests whose priority is in priorities. It either serves them with a
// cheaper model or refuses them (429 budget_degraded). Each step taken is
// recorded in the usage event and published once per period as an alert.
type DegradeStep struct {
	// At is the share of the limit's amount, above 0 and below 1, from
	// which the step applies (the limit itself refuses at 1).
	At float64 `yaml:"at"`
	// Priorities are the request priorities the step applies to: names of
	// priority.levels, in any case. Empty (default): every request.
	Priorities []string `yaml:"priorities"`
	// Model is the cheaper model (a name or alias of models) that serves
	// the requests the step applies to. Set exactly one of model and
	// refuse.
	Model string `yaml:"model"`
	// Refuse refuses the requests the step applies to, with 429
	// budget_degraded. Set exactly one of model and refuse.
	Refuse bool `yaml:"refuse"`
}

// Priority configures request priorities. A
// request's priority comes from its principal, never from the client
// alone: the token's priority claim (claims.priority) or the API key's
// priority, else priority.default. The x-tollgate-priority header may lower it to a
// later level and never raise it: a header naming a higher level than the
// principal's is served at the principal's. Names compare
// case-insensitively; a header or claim naming no level is refused (400
// invalid_priority, 401 for the claim).
type Priority struct {
	// Levels are the priority names, highest first, compared
	// case-insensitively. Default interactive, background, batch.
	Levels []string `yaml:"levels"`
	// Default is the priority of a principal that carries none: a token
	// without a priority claim, an API key without a priority. Default
	// the first of levels.
	Default string `yaml:"default"`
}

// RateLimit caps requests and tokens per minute for one scope value.
type RateLimit struct {
	// Scope is what the limit applies to: key, subject, team, dept or
	// project. Required.
	Scope string `yaml:"scope"`
	// Value is the scope value the limit applies to, or "*" for each value
	// separately.
	Value string `yaml:"value"`
	// RPM caps requests per minute. 0 (default): no cap. Over it, 429
	// rate_limit_exceeded with Retry-After.
	RPM int64 `yaml:"rpm"`
	// TPM caps tokens per minute, each request counted with the tokens
	// known before its upstream call. 0 (default): no cap.
	TPM int64 `yaml:"tpm"`
}

// RateLimiting configures rate limits across gateways. Zero values take the
// defaults shown.
type RateLimiting struct {
	// Local makes every gateway enforce each rpm/tpm limit alone, so N
	// gateways allow up to N times the limit. Default false: the gateways
	// sharing one NATS announce themselves in a KV bucket, and each
	// enforces limit/N with N the live gateways it sees (docs/budgets.md: rate
	// limits across gateways).
	Local bool `yaml:"local"`
	// PresenceTTL is how long a gateway counts as live after its last
	// announcement (renewed every third of it): a gateway that dies gives
	// its share back within presence_ttl plus a third. Default 15s, at
	// least 1s.
	PresenceTTL time.Duration `yaml:"presence_ttl"`
}

// ClickHouse describes how the analytics schema is laid out.
type ClickHouse struct {
	// Cluster, when set, is the ClickHouse cluster (a <remote_servers>
	// entry of the servers' config) the analytics service migrates: every
	// table ON CLUSTER with a Replicated engine, and a Distributed table
	// <name>_all over each when the cluster has several shards. Every
	// server needs the macros {shard} and {replica} and ZooKeeper (or
	// ClickHouse Keeper). Default empty: one server, plain MergeTree
	// tables. See docs/analytics.md, "Replicated ClickHouse".
	Cluster string `yaml:"cluster"`
	// ReplicaPath is the ZooKeeper path under which the replicated tables
	// keep their state; /<database>/<table> is appended. Default
	// /clickhouse/tables/{shard}.
	ReplicaPath string `yaml:"replica_path"`
}

// NATS says where the usage stream and the spend bucket live.
type NATS struct {
	// URL lists the NATS servers (comma-separated). Ignored with -embed, whose
	// gateway connects to its own embedded server. Default
	// nats://127.0.0.1:4222.
	URL string `yaml:"url"`
	// CredsFile is a NATS user credentials file (JWT and NKey seed) to
	// connect with. Default none.
	CredsFile string `yaml:"creds_file"`
	// NKeyFile is a file holding an NKey seed to connect with. Default
	// none.
	NKeyFile string `yaml:"nkey_file"`
	// TLS configures TLS to the NATS servers.
	TLS TLS `yaml:"tls"`
	// Replicas is the number of copies of the usage stream and the KV
	// buckets, 1 to 5. Default 1; 3 in a cluster.
	Replicas int `yaml:"replicas"`
	// MaxAge is how long the usage stream keeps events (and so how far
	// back a replay reaches). Default 400 days (9600h).
	MaxAge time.Duration `yaml:"max_age"`
	// DuplicateWindow is the span of the usage stream's server-side
	// dedupe by Nats-Msg-Id. Default 2m.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
}

// TLS holds client TLS files. All empty means plain TCP, unless the URL
// asks for TLS.
type TLS struct {
	// CAFile is a PEM file of the certificate authorities that verify the
	// servers. Default none: the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile is the client certificate (PEM), for servers that verify
	// clients. It goes with key_file.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the client certificate's private key (PEM). It goes with
	// cert_file.
	KeyFile string `yaml:"key_file"`
}

// Usage configures the usage-event publisher inside the gateway.
type Usage struct {
	// SpoolDir holds the batches NATS could not take, and the gateway's
	// producer id and batch sequence files. One directory per gateway
	// process. Default ./data/spool; with -embed, the spool/ directory of
	// the -data-dir flag.
	SpoolDir string `yaml:"spool_dir"`
	// Buffer is the length of the in-memory event queue, in events.
	// Default 65536.
	Buffer int `yaml:"buffer"`
	// BatchSize is the most events one batch (one stream message) carries.
	// Default 256.
	BatchSize int `yaml:"batch_size"`
	// BatchBytes is the most bytes one encoded batch takes, lowered at
	// start to fit the NATS server's max_payload (1 MiB by default).
	// Default 262144 (256 KiB), at most 4 MiB.
	BatchBytes int `yaml:"batch_bytes"`
	// SpoolMaxBytes bounds the spool's size on disk, in bytes. Default 1 GiB.
	SpoolMaxBytes int64 `yaml:"spool_max_bytes"`
	// SyncInterval is the spool's fsync interval: the most a SIGKILL can
	// lose. Default 100ms.
	SyncInterval time.Duration `yaml:"sync_interval"`
	// FlushDelay is how long the publisher may hold a batch open after its
	// first event while more arrive, so that they share one message and
	// one ack (usage events only; no request waits on it): the batch
	// leaves with the first event that ends flush_delay or more after its
	// first, or twice flush_delay after its first when none comes. 0 takes
	// the default, 20ms; a negative value (e.g. -1ms) never holds a batch
	// open.
	FlushDelay time.Duration `yaml:"flush_delay"`
	// FailClosed answers 503 when the queue and the spool are both full.
	// Default false: the request is served and the lost event counted in a
	// metric.
	FailClosed bool `yaml:"fail_closed"`
	// Compression is how batches are written to the stream and the spool:
	// "s2" (default: about a quarter of the bytes) or "none". Readers
	// older than compression cannot read s2 batches: upgrade the budget
	// and analytics services and tollctl before the gateways.
	Compression string `yaml:"compression"`
	// UnpricedModel is what a model with no price does: "zero" (bill 0 and
	// count it in a metric, default) or "refuse" (answer 400).
	UnpricedModel string `yaml:"unpriced_model"`
}

// Price is a config override of one price-table entry, as decimal USD
// strings. An entry sets at least one price.
type Price struct {
	// Input is the price of prompt tokens, USD per million.
	Input string `yaml:"input"`
	// Output is the price of completion tokens (reasoning included), USD
	// per million.
	Output string `yaml:"output"`
	// CachedInput is the price of prompt tokens read from the provider's
	// prompt cache, USD per million.
	CachedInput string `yaml:"cached_input"`
	// CacheWrite is the price of prompt tokens written to the provider's
	// prompt cache (Anthropic's cache_creation_input_tokens), USD per
	// million. Empty: they are billed at input.
	CacheWrite string `yaml:"cache_write"`
	// PerRequest is a price per call, USD.
	PerRequest string `yaml:"per_request"`
	// PerImage is the price of one generated image at the provider's
	// default size and quality, USD.
	PerImage string `yaml:"per_image"`
	// PerImageBy prices the image sizes and qualities that do not cost
	// per_image, USD per image, keyed "quality/size" with "*" for any one
	// of them: {"hd/1792x1024": "0.12", "*/1024x1792": "0.08", "hd/*":
	// "0.08"} (docs/endpoints.md: pass-through endpoints).
	PerImageBy map[string]string `yaml:"per_image_by"`
	// PerAudioSecond is the price of one second of audio, USD.
	PerAudioSecond string `yaml:"per_audio_second"`
	// Per1MCharacters is the price of a million characters of speech
	// input, USD.
	Per1MCharacters string `yaml:"per_1m_characters"`
	// Long is a long-context price tier.
	Long *LongPrice `yaml:"long"`
	// Tiers are the prices of the provider's service tiers.
	Tiers *Tiers `yaml:"tiers"`
}

// Tiers are the prices of a provider's service tiers (OpenAI
// service_tier). A request the provider reports it answered at flex or
// priority pays that tier's prices; a tier left out, or a field left
// empty, keeps the entry's base price. Cache writes keep cache_write.
type Tiers struct {
	// Flex are the prices of an answer the provider reports at
	// service_tier flex.
	Flex *TierPrice `yaml:"flex"`
	// Priority are the prices of an answer the provider reports at
	// service_tier priority.
	Priority *TierPrice `yaml:"priority"`
}

// TierPrice is one service tier's token prices, decimal USD per million
// tokens.
type TierPrice struct {
	// Input is the tier's price of prompt tokens, USD per million.
	Input string `yaml:"input"`
	// Output is the tier's price of completion tokens, USD per million.
	Output string `yaml:"output"`
	// CachedInput is the tier's price of cached prompt tokens, USD per
	// million.
	CachedInput string `yaml:"cached_input"`
}

// LongPrice is a long-context price tier. A request whose prompt has more
// than above_prompt_tokens tokens pays these prices, decimal USD per
// million tokens, for all its tokens; an empty field keeps the entry's
// base price.
type LongPrice struct {
	// AbovePromptTokens is the prompt size, in tokens, above which the
	// tier applies. Required, above 0.
	AbovePromptTokens uint64 `yaml:"above_prompt_tokens"`
	// Input is the tier's price of prompt tokens, USD per million.
	Input string `yaml:"input"`
	// Output is the tier's price of completion tokens, USD per million.
	Output string `yaml:"output"`
	// CachedInput is the tier's price of cached prompt tokens, USD per
	// million.
	CachedInput string `yaml:"cached_input"`
	// CacheWrite is the tier's price of prompt tokens written to the
	// provider's prompt cache, USD per million.
	CacheWrite string `yaml:"cache_write"`
}

// Log configures log/slog output (always to stderr).
type Log struct {
	// Format is "json" (default) or "text"; lines go to stderr.
	Format string `yaml:"format"`
	// Level is the lowest level logged: debug, info (default), warn or
	// error.
	Level string `yaml:"level"`
	// Requests logs one line per request at info level. Default false.
	Requests bool `yaml:"requests"`
}

// Auth lists the JWT issuers whose tokens are accepted.
type Auth struct {
	// Issuers are the trusted token issuers; a token is matched to one by
	// its iss claim.
	Issuers []Issuer `yaml:"issuers"`
	// CacheSize is the number of verified tokens kept so a repeated token
	// skips the signature check (exp and nbf are still checked on every
	// request). Default 65536; 0 keeps the default, -1 disables the cache.
	CacheSize int `yaml:"cache_size"`
	// allow_query_key accepts a token or API key in the "key" query parameter
	// of the Gemini endpoints (/v1beta/models/...), as Google's API does.
	// Default false: a key in a URL ends up in the logs of every proxy on
	// the way, so only the x-goog-api-key and Authorization headers are
	// read. The gateway never logs the query either way.
	AllowQueryKey bool `yaml:"allow_query_key"`
}

// Issuer is one trusted token issuer with pinned algorithms and keys.
type Issuer struct {
	// Name identifies the issuer in logs and errors. Required.
	Name string `yaml:"name"`
	// Issuer is the expected `iss` claim; tokens are matched to an issuer
	// by it. Required, unless discovery_url supplies it.
	Issuer string `yaml:"issuer"`
	// Audience is a value that, when set, must appear in the token's `aud`
	// claim. Default none: aud is not checked.
	Audience string `yaml:"audience"`
	// Algorithms are the signing algorithms pinned for this issuer: HS256,
	// HS384, HS512, RS256, ES256, EdDSA.
	// Tokens signed with anything else are rejected. Required.
	Algorithms []string `yaml:"algorithms"`
	// Leeway is the clock skew tolerated on exp, nbf and iat. Default 30s.
	Leeway time.Duration `yaml:"leeway"`
	// Keys verify signatures; a key with a kid only verifies tokens with
	// that kid.
	Keys []Key `yaml:"keys"`
	// JWKSFile is a JSON Web Key Set file (RSA, EC P-256 and Ed25519 keys)
	// whose keys are added to keys. With discovery_url or jwks_url it is
	// the fallback: its keys serve until the first successful fetch
	// replaces them.
	JWKSFile string `yaml:"jwks_file"`
	// DiscoveryURL is the identity provider's OpenID configuration
	// (".../.well-known/openid-configuration"); its issuer and jwks_uri are
	// used. The document's issuer must equal issuer. When issuer is empty
	// it defaults to discovery_url without that suffix (OpenID Connect
	// Discovery 1.0, section 4.3).
	DiscoveryURL string `yaml:"discovery_url"`
	// JWKSURL is a JSON Web Key Set fetched directly, instead of through
	// discovery_url.
	JWKSURL string `yaml:"jwks_url"`
	// JWKSRefreshMin is the shortest interval between two fetches of the
	// keys: fetched keys are refreshed after the response's Cache-Control
	// max-age, clamped to [jwks_refresh_min, jwks_refresh_max], and a
	// token with an unknown kid triggers a refetch at most once per
	// jwks_refresh_min. Default 1m.
	JWKSRefreshMin time.Duration `yaml:"jwks_refresh_min"`
	// JWKSRefreshMax is the refresh interval of fetched keys whose response
	// has no max-age, and the longest interval. Default 1h.
	JWKSRefreshMax time.Duration `yaml:"jwks_refresh_max"`
	// AllowHTTP permits plain http:// discovery and JWKS URLs off loopback.
	// Default false: only https://, or http:// to localhost, 127.0.0.0/8
	// or ::1.
	AllowHTTP bool `yaml:"allow_http"`
	// Claims renames the claims a principal is built from (docs/identity.md:
	// identity providers).
	Claims ClaimNames `yaml:"claims"`
	// ClaimMappings derive dept, team and project from other claims, such as
	// a group or a role.
	ClaimMappings []ClaimMapping `yaml:"claim_mappings"`
	// ClaimDefaults are the dept, team and project of a token that neither
	// carries them nor matches a mapping. Default empty.
	ClaimDefaults ClaimDefaults `yaml:"claim_defaults"`
}

// ClaimMapping maps one claim value to principal fields. A token whose
// claim at path claim equals value (a string claim) or contains it (an
// array of strings) gets the dept, team and project the rule sets. Each
// field is taken, in this order, from its own claim (claims.dept, ...)
// when that is a non-empty string, else from the first matching rule in
// list order that sets the field, else from claim_defaults.
type ClaimMapping struct {
	// Claim is a claim path, in the syntax of claims (a top-level claim
	// name, or a JSON Pointer starting with "/").
	Claim string `yaml:"claim"`
	// Value is the claim value the rule matches: the claim equals it (a
	// string claim) or contains it (an array of strings).
	Value string `yaml:"value"`
	// Dept is the department a matching token gets. Empty: the rule does
	// not set it.
	Dept string `yaml:"dept"`
	// Team is the team a matching token gets. Empty: the rule does not
	// set it.
	Team string `yaml:"team"`
	// Project is the project a matching token gets. Empty: the rule does
	// not set it.
	Project string `yaml:"project"`
}

// ClaimDefaults are principal fields used when no claim or mapping sets them.
type ClaimDefaults struct {
	// Dept is the department of a token no claim or mapping gives one.
	Dept string `yaml:"dept"`
	// Team is the team of a token no claim or mapping gives one.
	Team string `yaml:"team"`
	// Project is the project of a token no claim or mapping gives one.
	Project string `yaml:"project"`
}

// Key is one verification key. Set exactly one of secret, secret_file,
// public_key or public_key_file.
type Key struct {
	// KID is the key id. Optional; a key with a kid verifies only tokens
	// whose header names that kid.
	KID string `yaml:"kid"`
	// Secret is an HMAC secret (HS* algorithms), at least 32 bytes.
	Secret string `yaml:"secret"`
	// SecretFile is a file holding an HMAC secret; a trailing newline is
	// not part of it.
	SecretFile string `yaml:"secret_file"`
	// PublicKey is a PEM public key (RSA, ECDSA P-256 or Ed25519).
	PublicKey string `yaml:"public_key"`
	// PublicKeyFile is a file holding a PEM public key.
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
	// Subject is the claim of the principal's subject.
	Subject string `yaml:"subject"`
	// KeyID is the claim of the token's id, the key scope of budgets and
	// rate limits.
	KeyID string `yaml:"key_id"`
	// Dept is the claim of the principal's department.
	Dept string `yaml:"dept"`
	// Team is the claim of the principal's team.
	Team string `yaml:"team"`
	// Project is the claim of the principal's project.
	Project string `yaml:"project"`
	// Models is the claim of the model names and globs the token may use.
	Models string `yaml:"models"`
	// Budgets is the claim of inline spend limits signed by the issuer.
	Budgets string `yaml:"budgets"`
	// RPM is the claim of the principal's requests per minute.
	RPM string `yaml:"rpm"`
	// TPM is the claim of the principal's tokens per minute.
	TPM string `yaml:"tpm"`
	// Admin is the claim that grants the admin API.
	Admin string `yaml:"admin"`
	// Priority is the claim of the principal's highest request priority
	// (see priority).
	Priority string `yaml:"priority"`
}

// Provider is one upstream API endpoint with its credentials and timeouts.
type Provider struct {
	// Name is how models refer to this provider. Required, unique.
	Name string `yaml:"name"`
	// Kind is the wire protocol: "openai" (any OpenAI-compatible server),
	// "azure" (Azure OpenAI), "anthropic" (Messages API), "gemini" (Gemini
	// API), "bedrock" (AWS Bedrock Converse, SigV4 signed), or "mock" (the
	// built-in mock upstream, started in-process on loopback). Required.
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
	// APIVersion is Azure's api-version (required for azure), Anthropic's
	// anthropic-version header (default 2023-06-01), or the Gemini path
	// version (default v1beta).
	APIVersion string `yaml:"api_version"`
	// StreamUsage overrides how an OpenAI-compatible server (kind openai)
	// reports stream usage: ask (send stream_options.include_usage, and
	// hide the usage chunk from clients that did not ask), always or
	// never. Default the preset's.
	StreamUsage string `yaml:"stream_usage"`
	// Headers are extra static headers sent on every upstream request.
	Headers map[string]string `yaml:"headers"`
	// Region is the AWS region of kind bedrock (required for it), which
	// also gives its default base URL.
	Region string `yaml:"region"`
	// AccessKeyID is the AWS access key id that signs bedrock requests
	// (SigV4), usually "${AWS_ACCESS_KEY_ID}". Without it, api_key is a
	// Bedrock API key.
	AccessKeyID string `yaml:"access_key_id"`
	// SecretAccessKey is the AWS secret key that goes with access_key_id,
	// usually "${AWS_SECRET_ACCESS_KEY}".
	SecretAccessKey string `yaml:"secret_access_key"`
	// SessionToken is the AWS session token of temporary credentials,
	// usually "${AWS_SESSION_TOKEN}". Optional.
	SessionToken string `yaml:"session_token"`
	// APIKey is the provider credential, sent as a bearer token, api-key,
	// x-api-key or x-goog-api-key header by kind. Usually
	// "${OPENAI_API_KEY}"; when it expands to nothing, requests routed
	// here get 503 naming the variable.
	APIKey string `yaml:"api_key"`
	// APIKeyEnv is filled by Load with the variable APIKey referenced, so an
	// error can name it without ever showing a key.
	APIKeyEnv string `yaml:"-"`
	// Timeouts bound each phase of an upstream call.
	Timeouts Timeouts `yaml:"timeouts"`
	// MaxConns caps open connections to this provider; a call beyond it
	// gets 503. Default 4096.
	MaxConns int `yaml:"max_conns"`
	// MaxIdleConnDuration closes pooled connections idle this long. Default 30s.
	MaxIdleConnDuration time.Duration `yaml:"max_idle_conn_duration"`
	// MaxResponseBody bounds a non-stream response body, in bytes. Default
	// 64 MiB.
	MaxResponseBody int `yaml:"max_response_body"`
}

// Timeouts bound the phases of one upstream call.
type Timeouts struct {
	// Connect bounds dialing (TCP and TLS). Default 5s.
	Connect time.Duration `yaml:"connect"`
	// FirstByte bounds the wait for the response header of a streamed
	// call, which comes with its first event. Expiry answers 504. Default
	// 60s.
	FirstByte time.Duration `yaml:"first_byte"`
	// Idle bounds the gap between two reads of a streamed body. Expiry ends
	// the stream with an SSE error event. Default 60s.
	Idle time.Duration `yaml:"idle"`
	// Total bounds the whole call, non-stream and stream. Default 10m.
	Total time.Duration `yaml:"total"`
}

// Model is a name clients ask for and where it is served.
type Model struct {
	// Name is the `model` value clients send. Required, unique. A name with
	// one "*" is a wildcard route: "openai/*" serves "openai/gpt-4o",
	// passing "gpt-4o" upstream. Exact names and aliases win over
	// wildcards; among wildcards the longest pattern wins.
	Name string `yaml:"name"`
	// WildcardPattern is, on a wildcard route only, the regular expression
	// (Go RE2 syntax, matched against the whole part the "*" stands for)
	// that a requested name must fit to be passed upstream; a name that
	// does not fit is refused with 400 invalid_model_name before any
	// upstream call. The default takes "/"-separated segments of letters,
	// digits and . _ - : @ +, each starting with a letter or digit: model
	// ids, Bedrock ids and ARNs, Hugging Face repository names, never an
	// empty, "." or ".." segment. Names over 256 bytes, with control
	// characters or not UTF-8 are refused whatever the pattern (docs/security.md:
	// security).
	WildcardPattern string `yaml:"wildcard_pattern"`
	// Type is the kind of endpoint the model serves, and only that kind:
	// "chat" (default; chat, completions, the Responses API, the Messages
	// API and its count_tokens), "embeddings", "image"
	// (/v1/images/generations),
	// "speech" (/v1/audio/speech), "transcription"
	// (/v1/audio/transcriptions and /v1/audio/translations) or
	// "moderation" (/v1/moderations). A request for a model on another
	// kind of endpoint is 400 wrong_endpoint.
	Type string `yaml:"type"`
	// Aliases are other names clients may send for this model.
	Aliases []string `yaml:"aliases"`
	// Targets serve the model, chosen by strategy. At least one, at most 64.
	Targets []Target `yaml:"targets"`
	// Strategy picks among the targets: weighted (default; random in
	// proportion to the weights, equal unless set), round_robin (each in
	// turn), least_inflight (fewest calls in progress), latency (lowest
	// moving average of time to first token) or ordered (the first
	// healthy target in list order).
	Strategy string `yaml:"strategy"`
	// Fallbacks are models (names or aliases) tried in order after this
	// model's targets failed with a fallback_on failure. Their own
	// fallbacks are not followed. Each must be of the model's type.
	// Default none.
	Fallbacks []string `yaml:"fallbacks"`
	// Retry overrides routing.retry for requests to this model; zero fields
	// take the routing value.
	Retry Retry `yaml:"retry"`
	// FallbackOn overrides routing.fallback_on for requests to this model.
	FallbackOn []string `yaml:"fallback_on"`
	// Hedge starts a second call when the first is slow (docs/routing.md: hedged
	// requests). Default off.
	Hedge Hedge `yaml:"hedge"`
	// Cache serves repeated identical requests from the response cache: the
	// NATS KV bucket tollgate_cache, shared by every gateway. Default off.
	Cache ModelCache `yaml:"cache"`
	// Batch lets tokens allowed this model run it in batches (POST
	// /v1/batches). Default false: a batch whose input file
	// names the model is refused with 403 batch_not_enabled. The model
	// needs a target on the files_provider that calls it by its own name,
	// since the provider runs the batch's lines as written. A batch is
	// checked line by line, rate-limited and reserved against budgets
	// before the provider sees it, and billed at that estimate (docs/endpoints.md:
	// files and batches).
	Batch bool `yaml:"batch"`
}

// Target is one provider serving a model under its own name.
type Target struct {
	// Provider is the name of the provider that serves the target.
	// Required.
	Provider string `yaml:"provider"`
	// Model is the upstream model name; default the model's name, or "*"
	// in a wildcard route, where "*" stands for the part of the requested
	// name the route's "*" matched.
	Model string `yaml:"model"`
	// Weight is the target's share of requests under the weighted
	// strategy, relative to the other targets. Default 1.
	Weight int `yaml:"weight"`
	// RPM caps the requests per minute this gateway sends to the target; a
	// target at its cap is skipped, never queued. 0 (default): no cap.
	RPM int64 `yaml:"rpm"`
	// TPM caps the tokens per minute this gateway sends to the target; a
	// target at its cap is skipped, never queued. 0 (default): no cap.
	TPM int64 `yaml:"tpm"`
	// APIKeys are keys that, when set, replace the provider's api_key for
	// this target; they are used in rotation, one per call. None may be
	// empty.
	APIKeys []string `yaml:"api_keys"`
}
