// Package profiling sends continuous profiles (CPU, allocations, heap,
// goroutines) to a Pyroscope server with grafana/pyroscope-go. It is off
// unless a server address is configured, and it never delays or fails
// start-up because the server is down: uploads run in the background and
// their errors go to the logger at debug level, rate limited.
//
// While profiling runs, the CPU profiler is in use, so
// /debug/pprof/profile on the admin listener answers an error; the heap,
// goroutine and other pprof endpoints are unaffected.
package profiling

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/grafana/pyroscope-go"
)

// Environment variables read when the matching Config field is empty.
const (
	EnvServerAddress     = "PYROSCOPE_SERVER_ADDRESS"
	EnvBasicAuthUser     = "PYROSCOPE_BASIC_AUTH_USER"
	EnvBasicAuthPassword = "PYROSCOPE_BASIC_AUTH_PASSWORD"
	EnvTenantID          = "PYROSCOPE_TENANT_ID"
)

// DefaultApplicationName is the application name profiles are stored under.
const DefaultApplicationName = "tollgate.gateway"

// Config configures continuous profiling. Zero values take the defaults
// shown; with no server address profiling is off.
type Config struct {
	// ServerAddress is the Pyroscope server, e.g. http://pyroscope:4040.
	// Default $PYROSCOPE_SERVER_ADDRESS; when both are empty, Start does
	// nothing.
	ServerAddress string
	// ApplicationName names the profiled program. Default
	// DefaultApplicationName; the budget and analytics services pass
	// tollgate.budget and tollgate.analytics.
	ApplicationName string
	// Service is the "service" tag. Default the part of ApplicationName after
	// its last dot ("gateway").
	Service string
	// Instance is the "instance" tag. Default the host name (the pod name
	// in Kubernetes).
	Instance string
	// Tags are added to service and instance.
	Tags map[string]string
	// BasicAuthUser and BasicAuthPassword authenticate to the server.
	// Default $PYROSCOPE_BASIC_AUTH_USER and $PYROSCOPE_BASIC_AUTH_PASSWORD.
	BasicAuthUser, BasicAuthPassword string
	// TenantID selects the tenant of a multi-tenant server. Default
	// $PYROSCOPE_TENANT_ID.
	TenantID string
	// UploadRate is how often profiles are uploaded. Default 15s.
	UploadRate time.Duration
	// UploadTimeout bounds one upload, and so how long stop can wait for
	// uploads in flight. Default 10s.
	UploadTimeout time.Duration
	// LogInterval is the least time between two log lines of the same kind
	// from the profiler (a dead server fails every upload). Default 1m.
	LogInterval time.Duration
	// Getenv reads the environment. Default os.Getenv.
	Getenv func(string) string
}

// withDefaults fills the defaults; enabled reports whether a server address
// is set.
func (c Config) withDefaults() (_ Config, enabled bool) {
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	fromEnv := func(v *string, name string) {
		if *v == "" {
			*v = c.Getenv(name)
		}
	}
	fromEnv(&c.ServerAddress, EnvServerAddress)
	if c.ServerAddress == "" {
		return c, false
	}
	fromEnv(&c.BasicAuthUser, EnvBasicAuthUser)
	fromEnv(&c.BasicAuthPassword, EnvBasicAuthPassword)
	fromEnv(&c.TenantID, EnvTenantID)
	if c.ApplicationName == "" {
		c.ApplicationName = DefaultApplicationName
	}
	if c.Service == "" {
		c.Service = c.ApplicationName[strings.LastIndexByte(c.ApplicationName, '.')+1:]
	}
	if c.Instance == "" {
		c.Instance, _ = os.Hostname()
	}
	if c.UploadRate <= 0 {
		c.UploadRate = 15 * time.Second
	}
	if c.UploadTimeout <= 0 {
		c.UploadTimeout = 10 * time.Second
	}
	if c.LogInterval <= 0 {
		c.LogInterval = time.Minute
	}
	return c, true
}

// Start starts continuous profiling as cfg says and returns the func that
// stops it, which uploads what was collected since the last upload and
// returns within about UploadTimeout; calling it more than once is safe.
// When no server address is configured, Start does nothing and returns a
// no-op stop. An unreachable server does not make Start fail or wait: it
// returns at once, and each failed upload is logged at debug level (the
// same kind of message at most once per LogInterval). log may be nil.
func Start(cfg Config, log *slog.Logger) (stop func(), err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, enabled := cfg.withDefaults()
	if !enabled {
		log.Debug("continuous profiling off", "reason", "no "+EnvServerAddress)
		return func() {}, nil
	}
	tags := map[string]string{"service": cfg.Service}
	if cfg.Instance != "" {
		tags["instance"] = cfg.Instance
	}
	for k, v := range cfg.Tags {
		tags[k] = v
	}
	p, err := pyroscope.Start(pyroscope.Config{
		ApplicationName:   cfg.ApplicationName,
		Tags:              tags,
		ServerAddress:     cfg.ServerAddress,
		BasicAuthUser:     cfg.BasicAuthUser,
		BasicAuthPassword: cfg.BasicAuthPassword,
		TenantID:          cfg.TenantID,
		UploadRate:        cfg.UploadRate,
		Logger:            newLimitedLogger(log, cfg.LogInterval, time.Now),
		HTTPClient:        uploadClient(cfg.UploadTimeout),
	})
	if err != nil {
		return nil, fmt.Errorf("start profiling: %w", err)
	}
	log.Info("continuous profiling on", "server", redactURL(cfg.ServerAddress),
		"application", cfg.ApplicationName, "service", cfg.Service, "instance", cfg.Instance)
	var once sync.Once
	return func() {
		once.Do(func() { _ = p.Stop() }) // Stop always returns nil
	}, nil
}

// uploadClient is the client pyroscope-go builds for itself, with our
// timeout instead of its fixed 30s.
func uploadClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxConnsPerHost:     5,
			TLSHandshakeTimeout: timeout,
		},
		// A redirect would drop the Authorization header; answer it as is.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       timeout,
	}
}

// redactURL hides the password of a server address for logging.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable address)"
	}
	return u.Redacted()
}
