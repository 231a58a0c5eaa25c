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
	RequireToken bool `yaml:"require_token"`
	// AllowedHosts are further names an /admin/ or /debug/ request's Host
	// header may carry (case-insensitive, port ignored), such as a
	// Kubernetes Service name. Always accepted: loopback IPs, localhost,
	// the host of Listen and the listener's IPs (every IP when Listen is a
	// wildcard address). Other names get 403, so a DNS rebinding page
	// cannot read the admin API. Default none.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// Profiling configures continuous profiling with Pyroscope. Off unless
// ServerAddress or PYROSCOPE_SERVER_ADDRESS is set.
type Profiling struct {
	ServerAddress   string            `yaml:"server_address"`
	ApplicationName string            `yaml:"application_name"` // default tollgate.gateway
	Tags            map[string]string `yaml:"tags"`
}

// DefaultAdminListen is the admin listener's default address.
const DefaultAdminListen = "127.0.0.1:9090"

// AdminListenEnv overrides Admin.Listen.
const AdminListenEnv = "TOLLGATE_ADMIN_LISTEN"

// Tracing configures OpenTelemetry traces over OTLP/HTTP: one span per
// request and one per upstream attempt, with the GenAI attributes. Off
// unless Endpoint or OTEL_EXPORTER_OTLP_ENDPOINT is set.
type Tracing struct {
	// Endpoint is the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318.
	Endpoint string `yaml:"endpoint"`
	// ServiceName defaults to tollgate-gateway.
	ServiceName string `yaml:"service_name"`
	// SampleRatio of new traces, in (0, 1]. Default 1.
	SampleRatio float64 `yaml:"sample_ratio"`
	// Insecure sends plain HTTP to an endpoint given without a scheme.
	Insecure bool `yaml:"insecure"`
}
