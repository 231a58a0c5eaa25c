package router

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate/tollgate/pkg/config"
)

// strategy picks one target among the available ones.
type strategy uint8

const (
	weighted strategy = iota
	roundRobin
	leastInFlight
	lowestLatency
	ordered
)

// Route is one configured model: its targets, how it picks among them and
// what it falls back to. Routes are built by New and read-only after.
type Route struct {
	cfg            *config.Model
	name           string
	embeddings     bool
	typ            string // config.Model.Type, "chat" when unset
	wildcard       bool
	prefix, suffix string         // around the "*" of a wildcard name
	capture        *regexp.Regexp // what the "*" may stand for, anchored
	strategy       strategy
	targets        []*target
	chain          []*Route // fallback models, then the default fallback
	triggers       uint32   // bit per Class that allows another call
	maxAttempts    int
	backoffBase    int64 // ns
	backoffMax     int64 // ns
	deadline       int64 // ns
	hedgeAfter     int64 // ns; 0 with hedgeP95 or without hedging
	hedgeP95       bool
	hedgeable      bool          // hedging is on and there is a second target
	rr             atomic.Uint64 // round-robin position
}

// Name returns the model's configured name (for a wildcard route, the
// pattern, e.g. "openai/*").
func (rt *Route) Name() string { return rt.name }

// Config returns the model's configuration (read-only), e.g. for its cache
// settings.
func (rt *Route) Config() *config.Model { return rt.cfg }

// Embeddings reports whether the model serves the embeddings endpoint.
func (rt *Route) Embeddings() bool { return rt.embeddings }

// Type returns the kind of endpoint the model serves (config.Model.Type,
// config.ModelTypeChat when unset).
func (rt *Route) Type() string { return rt.typ }

// Wildcard reports whether the route is a wildcard pattern.
func (rt *Route) Wildcard() bool { return rt.wildcard }

// CheckCapture reports whether capture, the part of a requested name a
// wildcard route's "*" matched, fits the route's wildcard_pattern, has no
// control characters and is at most config.MaxWildcardCapture bytes; the
// error says why not. Exact routes accept "".
func (rt *Route) CheckCapture(capture string) error {
	if rt.capture == nil {
		return nil
	}
	// Whatever the pattern, a name with control characters or bytes that
	// are not UTF-8 is never a model's: it would reach logs, headers and
	// URLs.
	if len(capture) > config.MaxWildcardCapture {
		return fmt.Errorf("the part of the name that the \"*\" of %s stands for is longer than %d bytes", rt.name, config.MaxWildcardCapture)
	}
	if !utf8.ValidString(capture) || strings.IndexFunc(capture, unicode.IsControl) >= 0 {
		return fmt.Errorf("%q, the part of the name that the \"*\" of %s stands for, has control characters or is not UTF-8", capture, rt.name)
	}
	if rt.capture.MatchString(capture) {
		return nil
	}
	return fmt.Errorf("%q, the part of the name that the \"*\" of %s stands for, does not match its wildcard_pattern %s",
		capture, rt.name, rt.capture)
}

// Fallbacks returns the names of the models tried after this one, in order
// (the model's fallbacks, then the default fallback).
func (rt *Route) Fallbacks() []string {
	names := make([]string, len(rt.chain))
	for i, fb := range rt.chain {
		names[i] = fb.name
	}
	return names
}

// target is one provider and upstream model serving a route.
type target struct {
	route         *Route
	provider      string
	providerIndex int
	model         string // upstream name; in a wildcard route "*" stands for the capture
	deployment    string // provider/model
	weight        uint64
	keys          []string
	keyPos        atomic.Uint64
	rpm, tpm      limiter
	h             *health // shared by every route listing the same deployment
}

// newRoute builds the route of m. healthOf returns the shared state of a
// deployment.
func newRoute(m *config.Model, providers map[string]int, healthOf func(dep, prov, model string) *health) (*Route, error) {
	rt := &Route{
		cfg:         m,
		name:        m.Name,
		embeddings:  m.Type == config.ModelTypeEmbeddings,
		typ:         cmp.Or(m.Type, config.ModelTypeChat),
		wildcard:    config.IsWildcard(m.Name),
		maxAttempts: max(1, m.Retry.MaxAttempts),
		backoffBase: int64(orDuration(m.Retry.BackoffBase, config.DefaultBackoffBase)),
		backoffMax:  int64(orDuration(m.Retry.BackoffMax, config.DefaultBackoffMax)),
		deadline:    int64(orDuration(m.Retry.Deadline, config.DefaultRetryDeadline)),
	}
	if len(m.Targets) == 0 || len(m.Targets) > config.MaxTargets {
		return nil, fmt.Errorf("model %s: want 1 to %d targets (got %d)", m.Name, config.MaxTargets, len(m.Targets))
	}
	if rt.wildcard {
		i := strings.IndexByte(m.Name, '*')
		rt.prefix, rt.suffix = m.Name[:i], m.Name[i+1:]
		pattern := m.WildcardPattern
		if pattern == "" {
			pattern = config.DefaultWildcardPattern
		}
		re, err := regexp.Compile(`^(?:` + pattern + `)$`)
		if err != nil {
			return nil, fmt.Errorf("model %s: wildcard_pattern: %w", m.Name, err)
		}
		rt.capture = re
	}
	switch m.Strategy {
	case config.StrategyWeighted, "":
		rt.strategy = weighted
	case config.StrategyRoundRobin:
		rt.strategy = roundRobin
	case config.StrategyLeastInFlight:
		rt.strategy = leastInFlight
	case config.StrategyLatency:
		rt.strategy = lowestLatency
	case config.StrategyOrdered:
		rt.strategy = ordered
	default:
		return nil, fmt.Errorf("model %s: unknown strategy %q", m.Name, m.Strategy)
	}
	triggers := m.FallbackOn
	if triggers == nil {
		triggers = config.DefaultFallbackOn()
	}
	for _, name := range triggers {
		c, ok := triggerClass(name)
		if !ok {
			return nil, fmt.Errorf("model %s: unknown fallback_on trigger %q", m.Name, name)
		}
		rt.triggers |= 1 << c
	}
	switch h := m.Hedge.After; h {
	case "":
	case config.HedgeP95:
		rt.hedgeP95 = true
	default:
		d, err := time.ParseDuration(h)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("model %s: hedge.after %q is neither a positive duration nor p95", m.Name, h)
		}
		rt.hedgeAfter = int64(d)
	}
	for _, tc := range m.Targets {
		pi, ok := providers[tc.Provider]
		if !ok {
			return nil, fmt.Errorf("model %s: unknown provider %q", m.Name, tc.Provider)
		}
		t := &target{
			route:         rt,
			provider:      tc.Provider,
			providerIndex: pi,
			model:         tc.Model,
			weight:        uint64(max(1, tc.Weight)),
			keys:          tc.APIKeys,
			rpm:           newLimiter(tc.RPM),
			tpm:           newLimiter(tc.TPM),
		}
		if t.model == "" {
			t.model = m.Name
			if rt.wildcard {
				t.model = "*"
			}
		}
		t.deployment = t.provider + "/" + t.model
		t.h = healthOf(t.deployment, t.provider, t.model)
		rt.targets = append(rt.targets, t)
	}
	return rt, nil
}

// upstreamModel returns the name to send upstream for a request whose
// wildcard capture is capture.
func (t *target) upstreamModel(capture string) string {
	if !t.route.wildcard {
		return t.model
	}
	if t.model == "*" {
		return capture
	}
	return strings.Replace(t.model, "*", capture, 1)
}

// key returns the API key for the next call and its index, or "" and -1
// when the target has no keys of its own.
func (t *target) key() (string, int) {
	if len(t.keys) == 0 {
		return "", -1
	}
	i := int((t.keyPos.Add(1) - 1) % uint64(len(t.keys)))
	return t.keys[i], i
}

func orDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// limiter caps a rate per minute with the generic cell rate algorithm: tat
// is the theoretical arrival time of the next unit; a unit fits while tat
// stays within a minute of now, so a whole minute's allowance may be used
// at once. Lock free: one CAS per take.
type limiter struct {
	tat  atomic.Int64 // ns since Router.base
	step int64        // ns per unit; 0 means no cap
}

const capWindow = int64(time.Minute)

func newLimiter(perMinute int64) limiter {
	if perMinute <= 0 {
		return limiter{}
	}
	return limiter{step: max(1, capWindow/perMinute)}
}

// room reports whether one more unit fits now, without taking it.
func (l *limiter) room(now int64) bool {
	return l.step == 0 || l.tat.Load()-now <= capWindow-l.step
}

// take takes one unit if it fits.
func (l *limiter) take(now int64) bool {
	if l.step == 0 {
		return true
	}
	for {
		old := l.tat.Load()
		t := max(old, now) + l.step
		if t-now > capWindow {
			return false
		}
		if l.tat.CompareAndSwap(old, t) {
			return true
		}
	}
}

// charge takes n units, even beyond the cap (tokens are known only after
// the call); the excess keeps the target skipped until it has drained.
func (l *limiter) charge(now, n int64) {
	if l.step == 0 || n <= 0 {
		return
	}
	for {
		old := l.tat.Load()
		if l.tat.CompareAndSwap(old, max(old, now)+n*l.step) {
			return
		}
	}
}
