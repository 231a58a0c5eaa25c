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
