package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// ErrNotLoopback is returned for a target outside 127.0.0.0/8, ::1 and
// localhost when remote targets are not allowed: this tool measures local
// benchmarks and is not meant to load other people's servers.
var ErrNotLoopback = errors.New("target is not a loopback address (set -allow-remote to override)")

// Upper bounds keep every run a benchmark, not a flood.
const (
	maxConcurrency = 1 << 16
	maxRate        = 1_000_000
	maxHold        = 1 << 20
	maxInflight    = 1 << 16
)

// Config is one load run. Exactly one mode is chosen: Hold > 0 (hold
// streams open), Rate > 0 (open loop) or else closed loop with Concurrency
// workers.
type Config struct {
	// URL is the target, e.g. http://127.0.0.1:8080/v1/chat/completions.
	URL string
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Headers are extra request headers as name/value pairs.
	Headers [][2]string
	// Body is the POST body sent with every request.
	Body []byte
	// BodyInfo describes Body in the report (a BodySpec or a file name).
	BodyInfo any

	// Stream expects an SSE answer (set it when the body asks to stream).
	Stream bool
	// Chunks is the exact number of content chunks each stream must carry;
	// 0 accepts any positive number.
	Chunks int
	// Embeddings validates answers as embeddings instead of chat completions.
	Embeddings bool
	// Dims is the number of values each embedding must have; 0 accepts any.
	Dims int

	// Concurrency is the number of closed-loop workers. Default 1.
	Concurrency int
	// Rate is the open-loop request rate per second.
	Rate float64
	// MaxInflight caps open-loop requests in flight; a request due while the
	// cap is reached is not sent and counts as a "dropped" error. Default 1000.
	MaxInflight int
	// Hold opens this many concurrent streams and keeps them open for
	// Duration, to measure memory per open stream.
	Hold int

	// Duration is the measured window. With Requests set it only caps the
	// run. Required.
	Duration time.Duration
	// Warmup runs load before the measured window; its requests are not
	// counted. Not used by Hold.
	Warmup time.Duration
	// Requests, when positive, ends the run after this many measured requests.
	Requests int64
	// Timeout bounds each request, from its (intended) send time to the end
	// of its body. Default 30s.
	Timeout time.Duration

	// PIDs are processes (e.g. the gateway and the mock) whose CPU time and
	// memory are sampled over the window; this process is always sampled.
	PIDs []int
	// SampleEvery is the /proc sampling interval for peak RSS. Default 100ms.
	SampleEvery time.Duration
	// AllowRemote permits targets that are not loopback.
	AllowRemote bool
}

// mode returns the run's mode name.
func (c *Config) mode() string {
	switch {
	case c.Hold > 0:
		return "hold"
	case c.Rate > 0:
		return "open"
	}
	return "closed"
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = 1000
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = 100 * time.Millisecond
	}
	return c
}

// validate checks c (after withDefaults) and returns the parsed target.
func (c *Config) validate(ctx context.Context) (*url.URL, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, fmt.Errorf("parse url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("url %q: scheme must be http or https", c.URL)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("url %q: no host", c.URL)
	}
	if err := CheckTarget(ctx, u.Hostname(), c.AllowRemote); err != nil {
		return nil, err
	}
	switch {
	case len(c.Body) == 0:
		return nil, errors.New("body is empty")
	case c.Duration <= 0:
		return nil, errors.New("duration must be positive")
	case c.Warmup < 0, c.Requests < 0, c.Timeout < 0, c.SampleEvery < 0, c.Chunks < 0, c.Dims < 0:
		return nil, errors.New("negative warmup, requests, timeout, sample interval, chunks or dims")
	case c.Stream && c.Embeddings:
		return nil, errors.New("embeddings cannot stream")
	case c.Concurrency < 1 || c.Concurrency > maxConcurrency:
		return nil, fmt.Errorf("concurrency %d: want 1..%d", c.Concurrency, maxConcurrency)
	case c.Rate < 0 || c.Rate > maxRate:
		return nil, fmt.Errorf("rate %g: want 0..%d", c.Rate, maxRate)
	case c.MaxInflight < 1 || c.MaxInflight > maxInflight:
		return nil, fmt.Errorf("max in-flight %d: want 1..%d", c.MaxInflight, maxInflight)
	case c.Hold < 0 || c.Hold > maxHold:
		return nil, fmt.Errorf("hold %d: want 0..%d", c.Hold, maxHold)
	case c.Hold > 0 && c.Rate > 0:
		return nil, errors.New("hold and rate are exclusive")
	case c.Hold > 0 && !c.Stream:
		return nil, errors.New("hold needs a streaming request")
	}
	for _, h := range c.Headers {
		if h[0] == "" || strings.ContainsAny(h[0], " \t\r\n:") || strings.ContainsAny(h[1], "\r\n") {
			return nil, fmt.Errorf("header %q: bad name or value", h[0])
		}
	}
	return u, nil
}

// CheckTarget returns nil when host is a loopback address or "localhost"
// resolving only to loopback addresses, or when allowRemote is set, and an
// error wrapping ErrNotLoopback otherwise.
func CheckTarget(ctx context.Context, host string, allowRemote bool) error {
	if allowRemote {
		return nil
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() {
			return nil
		}
		return fmt.Errorf("target %s: %w", host, ErrNotLoopback)
	}
	if host != "localhost" {
		return fmt.Errorf("target %s: %w", host, ErrNotLoopback)
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", host, err)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return fmt.Errorf("target %s resolves to %s: %w", host, a.IP, ErrNotLoopback)
		}
	}
	return nil
}
