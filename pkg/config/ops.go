package config

// Admin configures the admin listener (health, metrics, pprof, config view,
// routes, budgets, reload), separate from the public one.
type Admin struct {
	// Listen is the admin address. Default 127.0.0.1:9090; the
	// TOLLGATE_ADMIN_LISTEN environment variable overrides it; "off"
	// disables the listener.
	Listen string `yaml:"listen"`
	// RequireToken demands a token with the admin claim even when the
	// listener is bound to loopback. Off loopback it is always required.
	// Default false.
	RequireToken bool `yaml:"require_token"`
	// AllowedHosts are further names an /admin/ or /debug/ request's Host
	// header may carry (case-insensitive, port ignored), such as a
	// Kubernetes Service name. Always accepted: loopback IPs, localhost,
	// the host of listen and the listener's IPs (every IP when listen is a
	// wildcard address). Other names get 403 host_not_allowed, so a DNS
	// rebinding page cannot read the admin API. Default none.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// Profiling configures continuous profiling with Pyroscope. It is off
// unless server_address or PYROSCOPE_SERVER_ADDRESS is set.
type Profiling struct {
	// ServerAddress is the Pyroscope server, e.g. http://pyroscope:4040.
	// Default the PYROSCOPE_SERVER_ADDRESS environment variable; when both
	// are empty, profiling is off.
	ServerAddress string `yaml:"server_address"`
	// ApplicationName is the gateway's application name in Pyroscope. The
	// budget and analytics services profile as tollgate.budget and
	// tollgate.analytics.
	ApplicationName string `yaml:"application_name"`
	// Tags are extra tags on every profile.
	Tags map[string]string `yaml:"tags"`
}

// DefaultAdminListen is the admin listener's default address.
const DefaultAdminListen = "127.0.0.1:9090"

// AdminListenEnv overrides Admin.Listen.
const AdminListenEnv = "TOLLGATE_ADMIN_LISTEN"

// Tracing configures OpenTelemetry traces over OTLP/HTTP: one span per
// request and one per upstream attempt, with the GenAI attributes. It is
// off unless endpoint, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT is set.
type Tracing struct {
	// Endpoint is the OpenTelemetry collector's OTLP/HTTP address (protobuf
	// bodies), e.g. http://127.0.0.1:4318; /v1/traces is appended when the
	// URL has no path. Without it, the OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// environment variable (as it is) or OTEL_EXPORTER_OTLP_ENDPOINT (plus
	// /v1/traces); with neither, tracing is off.
	//
	// One span is recorded per request and per upstream attempt, with the
	// GenAI attributes; traceparent is continued from clients and sent
	// upstream. The exporter also reads OTEL_EXPORTER_OTLP_[TRACES_]HEADERS,
	// _TIMEOUT (ms per batch, default 10000), _COMPRESSION (gzip),
	// _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY. A batch the
	// collector answers with 429, 502, 503 or 504 is sent again (after its
	// Retry-After, else 0.5s doubling to 5s) until its timeout; any other
	// failure drops the batch and logs "trace export failing" once, until
	// an export succeeds again.
	Endpoint string `yaml:"endpoint"`
	// ServiceName is the service.name of the spans. Default the
	// OTEL_SERVICE_NAME environment variable, else tollgate-gateway.
	ServiceName string `yaml:"service_name"`
	// SampleRatio is the fraction of new traces recorded, above 0 and at
	// most 1; 0 (unset) records every trace. A trace continued from a
	// client's traceparent follows the client's sampling decision.
	SampleRatio float64 `yaml:"sample_ratio"`
	// Insecure sends plain HTTP to an endpoint given without a scheme
	// ("host:port"); an http:// or https:// scheme decides on its own.
	// Default false: HTTPS. OTEL_SDK_DISABLED=true turns tracing off.
	Insecure bool `yaml:"insecure"`
}
