package config

import (
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/providers/kind"
)

// Defaults documented on the fields of Config and applied by ApplyDefaults.
const (
	DefaultListen              = "127.0.0.1:8080"
	DefaultBodyLimit           = 8 << 20
	DefaultShutdownGrace       = 30 * time.Second
	DefaultReadTimeout         = 30 * time.Second
	DefaultIdleTimeout         = 120 * time.Second
	DefaultWriteTimeout        = 30 * time.Second
	DefaultMaxHeaderBytes      = 8 << 10
	DefaultLogFormat           = "json"
	DefaultLogLevel            = "info"
	DefaultAuthCacheSize       = 65536
	DefaultLeeway              = 30 * time.Second
	DefaultJWKSRefreshMin      = time.Minute
	DefaultJWKSRefreshMax      = time.Hour
	DefaultConnectTimeout      = 5 * time.Second
	DefaultFirstByteTimeout    = 60 * time.Second
	DefaultIdleReadTimeout     = 60 * time.Second
	DefaultTotalTimeout        = 10 * time.Minute
	DefaultMaxConns            = 4096
	DefaultMaxIdleConnDuration = 30 * time.Second
	DefaultMaxResponseBody     = 64 << 20
	DefaultModelType           = ModelTypeChat
	DefaultNATSReplicas        = 1
	DefaultNATSMaxAge          = 400 * 24 * time.Hour
	DefaultDuplicateWindow     = 2 * time.Minute
	DefaultSpoolDir            = "./data/spool"
	DefaultUsageBuffer         = 65536
	DefaultUsageBatchSize      = 256
	DefaultUsageBatchBytes     = 256 << 10
	// MaxUsageBatchBytes is the largest usage.batch_bytes: a spool record's
	// limit. The publisher lowers the value it uses to fit the NATS
	// server's max_payload (1 MiB by default).
	MaxUsageBatchBytes   = 4 << 20
	DefaultSpoolMaxBytes = 1 << 30
	DefaultSyncInterval  = 100 * time.Millisecond
	DefaultUnpricedModel = UnpricedZero
)

// Values of Provider.Kind. Package kind owns them (and what each kind
// needs from its config); they are repeated here for code that builds a
// Config.
const (
	KindOpenAI    = kind.OpenAI
	KindAzure     = kind.Azure
	KindAnthropic = kind.Anthropic
	KindGemini    = kind.Gemini
	KindBedrock   = kind.Bedrock
	KindMock      = kind.Mock
)

// Values of the other enumerated string fields.
const (
	ModelTypeChat          = "chat"          // Model.Type
	ModelTypeEmbeddings    = "embeddings"    // Model.Type
	ModelTypeImage         = "image"         // Model.Type: /v1/images/generations
	ModelTypeSpeech        = "speech"        // Model.Type: /v1/audio/speech
	ModelTypeTranscription = "transcription" // Model.Type: /v1/audio/transcriptions and /v1/audio/translations
	ModelTypeModeration    = "moderation"    // Model.Type: /v1/moderations

	UnpricedZero   = "zero"   // Usage.UnpricedModel
	UnpricedRefuse = "refuse" // Usage.UnpricedModel

	// Usage.Compression; pkg/usage reads the same strings
	// (usage.CompressionS2, usage.CompressionNone).
	CompressionS2   = "s2"
	CompressionNone = "none"
)

// ModelTypes are the values of Model.Type, one per kind of endpoint.
var ModelTypes = []string{ModelTypeChat, ModelTypeEmbeddings, ModelTypeImage, ModelTypeSpeech,
	ModelTypeTranscription, ModelTypeModeration}

// ApplyDefaults replaces zero values with the defaults documented on each
// field. Parse and Load call it; code that builds a Config by hand (tests)
// can call it too. It is idempotent.
func (c *Config) ApplyDefaults() {
	setDefault(&c.Listen, DefaultListen)
	setDefault(&c.Admin.Listen, DefaultAdminListen)
	setDefault(&c.Console.SessionTTL, DefaultConsoleSessionTTL)
	if c.Console.OIDC.Scopes == nil {
		c.Console.OIDC.Scopes = []string{"profile", "email"}
	}
	setDefault(&c.BodyLimit, DefaultBodyLimit)
	setDefault(&c.ShutdownGrace, DefaultShutdownGrace)
	setDefault(&c.ReadTimeout, DefaultReadTimeout)
	setDefault(&c.IdleTimeout, DefaultIdleTimeout)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&c.Log.Format, DefaultLogFormat)
	setDefault(&c.Log.Level, DefaultLogLevel)

	setDefault(&c.Auth.CacheSize, DefaultAuthCacheSize)
	for i := range c.Auth.Issuers {
		is := &c.Auth.Issuers[i]
		setDefault(&is.Leeway, DefaultLeeway)
		is.Claims = is.Claims.WithDefaults()
		is.ApplyDefaults()
	}

	for i := range c.Providers {
		p := &c.Providers[i]
		setDefault(&p.Timeouts.Connect, DefaultConnectTimeout)
		setDefault(&p.Timeouts.FirstByte, DefaultFirstByteTimeout)
		setDefault(&p.Timeouts.Idle, DefaultIdleReadTimeout)
		setDefault(&p.Timeouts.Total, DefaultTotalTimeout)
		setDefault(&p.MaxConns, DefaultMaxConns)
		setDefault(&p.MaxIdleConnDuration, DefaultMaxIdleConnDuration)
		setDefault(&p.MaxResponseBody, DefaultMaxResponseBody)
	}

	for i := range c.Models {
		m := &c.Models[i]
		setDefault(&m.Type, DefaultModelType)
		upstream := m.Name
		if IsWildcard(m.Name) {
			upstream = "*"
			setDefault(&m.WildcardPattern, DefaultWildcardPattern)
		}
		for j := range m.Targets {
			setDefault(&m.Targets[j].Model, upstream)
		}
	}
	c.applyRoutingDefaults()

	setDefault(&c.NATS.Replicas, DefaultNATSReplicas)
	setDefault(&c.NATS.MaxAge, DefaultNATSMaxAge)
	setDefault(&c.NATS.DuplicateWindow, DefaultDuplicateWindow)

	setDefault(&c.Usage.SpoolDir, DefaultSpoolDir)
	setDefault(&c.Usage.Buffer, DefaultUsageBuffer)
	setDefault(&c.Usage.BatchSize, DefaultUsageBatchSize)
	setDefault(&c.Usage.BatchBytes, DefaultUsageBatchBytes)
	setDefault(&c.Usage.SpoolMaxBytes, DefaultSpoolMaxBytes)
	setDefault(&c.Usage.SyncInterval, DefaultSyncInterval)
	setDefault(&c.Usage.UnpricedModel, DefaultUnpricedModel)
	setDefault(&c.Usage.Compression, CompressionS2)
}

// ApplyDefaults derives Issuer from DiscoveryURL when it is empty and sets
// the JWKS refresh bounds of an issuer that fetches its keys.
func (is *Issuer) ApplyDefaults() {
	if is.Issuer == "" {
		if iss, ok := strings.CutSuffix(is.DiscoveryURL, WellKnownOpenIDConfiguration); ok {
			is.Issuer = iss
		}
	}
	if is.DiscoveryURL != "" || is.JWKSURL != "" {
		setDefault(&is.JWKSRefreshMin, DefaultJWKSRefreshMin)
		setDefault(&is.JWKSRefreshMax, DefaultJWKSRefreshMax)
	}
}

// WellKnownOpenIDConfiguration is the path suffix of an OpenID Connect
// discovery document.
const WellKnownOpenIDConfiguration = "/.well-known/openid-configuration"

// WithDefaults returns n with every empty name replaced by its default
// claim name (sub, jti, dept, team, project, models, budgets, rpm, tpm, admin,
// priority).
func (n ClaimNames) WithDefaults() ClaimNames {
	setDefault(&n.Subject, "sub")
	setDefault(&n.KeyID, "jti")
	setDefault(&n.Dept, "dept")
	setDefault(&n.Team, "team")
	setDefault(&n.Project, "project")
	setDefault(&n.Models, "models")
	setDefault(&n.Budgets, "budgets")
	setDefault(&n.RPM, "rpm")
	setDefault(&n.TPM, "tpm")
	setDefault(&n.Admin, "admin")
	setDefault(&n.Priority, "priority")
	return n
}

// setDefault stores def in *v when *v is the zero value.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
