package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tollgate/tollgate/pkg/admin"
	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/metrics"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// Settings is a validated config with what is built from it and replaced
// by a reload: the token verifier, the price table and the budget limits.
type Settings struct {
	Config   *config.Config
	Verifier *auth.Verifier
	Prices   *pricing.Table
	Limits   []budget.Limit
	// KeysErr is why keys of an issuer configured by discovery_url or
	// jwks_url could not be fetched at load (nil when all were); such an
	// issuer verifies with its jwks_file fallback, if any, and its loop
	// (Reloader.Run) keeps trying.
	KeysErr error
}

// keysFetchTimeout bounds the first fetch of remote issuer keys at load.
const keysFetchTimeout = 15 * time.Second

// LoadSettings reads the config file at path, validates it and builds its
// Settings. Start-up and every reload (Reloader) call it, so a reload
// refuses exactly what start-up refuses. Providers of kind mock get the
// base URL mockURL returns; it is called once, and only when the file has
// such a provider, and its error refuses the file.
func LoadSettings(path string, mockURL func() (string, error)) (*Settings, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	base := ""
	for i := range cfg.Providers {
		if cfg.Providers[i].Kind != config.KindMock {
			continue
		}
		if base == "" {
			if base, err = mockURL(); err != nil {
				return nil, err
			}
		}
		cfg.Providers[i].BaseURL = base
	}
	v, err := auth.NewVerifier(cfg.Auth, time.Now)
	if err != nil {
		return nil, err
	}
	prices, err := cfg.PriceTable()
	if err != nil {
		return nil, err
	}
	limits, err := budget.ParseLimits(cfg.Budgets)
	if err != nil {
		return nil, err
	}
	if err := budget.ValidateHierarchy(limits, cfg.BudgetOvercommit); err != nil {
		return nil, err
	}
	// Keys of remote issuers are fetched before the verifier serves, so a
	// start or a reload does not begin by refusing their tokens.
	ctx, cancel := context.WithTimeout(context.Background(), keysFetchTimeout)
	defer cancel()
	return &Settings{Config: cfg, Verifier: v, Prices: prices, Limits: limits, KeysErr: v.Refresh(ctx)}, nil
}

// limitSetter takes a reload's budget limits; *budget.Tracker is one.
type limitSetter interface {
	SetLimits(limits []budget.Limit)
}

// errMockAdded refuses a reload that adds a mock provider to a process
// that started without the mock upstream.
var errMockAdded = errors.New("a mock provider was added; it needs a restart")

// recorder stores audit events; *audit.Recorder is one.
type recorder interface {
	Record(ctx context.Context, e audit.Event) error
}

// Reloader re-reads the config file (SIGHUP, POST /admin/reload) and
// applies it to new requests, whole or not at all; a file LoadSettings
// refuses changes nothing and records nothing. A valid file that changes a
// key the running process cannot apply (a config.Restart key, or a
// condition of config.Keys) is refused with an error naming those keys
// and recorded as audit.ActionConfigRefused. Each applied reload is
// recorded as an audit event, and one that changes budget limits as a
// second one.
type Reloader struct {
	path    string
	gw      *Gateway
	limits  limitSetter
	mockURL func() (string, error)
	log     *slog.Logger
	audit   recorder // nil records nothing

	mu       sync.Mutex // serializes Reload; guards base, stopKeys and onApply
	cfg      atomic.Pointer[config.Config]
	verifier atomic.Pointer[auth.Verifier]
	base     context.Context    // Run's: the lifetime of key refresh loops; nil before Run
	stopKeys context.CancelFunc // ends the running verifier's key refresh loop
	loops    sync.WaitGroup     // the key refresh loops, waited for when Run returns
	onApply  []func(*config.Config)
	override func(*config.Config) // nil: none
}

// Override sets f to be applied to every config a reload loads, before it
// is compared with the running one: what the process sets over the file
// from its flags (gateway -embed's spool directory), as it did at start,
// so that the file's value of such a key is neither applied nor taken for
// a change. Call it before Run.
func (r *Reloader) Override(f func(*config.Config)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.override = f
}

// ErrNeedsRestart is wrapped by the error of a reload refused because the
// file changes keys the running process applies only at start; the error
// names them.
var ErrNeedsRestart = errors.New("keys that need a restart")

// OnApply adds f to what a reload applies: f is called with every config
// a reload puts in place, and once now with the running one (so nothing
// applied between the start and this call is missed). It applies keys
// owned outside the gateway, such as admin.require_token.
func (r *Reloader) OnApply(f func(*config.Config)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onApply = append(r.onApply, f)
	f(r.cfg.Load())
}

// NewReloader returns the Reloader of the file at path, running s (what
// LoadSettings returned at start-up) on gw. mockURL is the base URL of the
// mock upstream, an error when it was not started. rec records the audit
// events of reloads; nil records none.
func NewReloader(path string, s *Settings, gw *Gateway, limits limitSetter, mockURL func() (string, error), rec recorder, log *slog.Logger) *Reloader {
	r := &Reloader{path: path, gw: gw, limits: limits, mockURL: mockURL, audit: rec, log: log}
	r.cfg.Store(s.Config)
	r.verifier.Store(s.Verifier)
	return r
}

// ReloadSummary is what a successful reload reports.
type ReloadSummary struct {
	Providers int    `json:"providers"`
	Models    int    `json:"models"`
	Issuers   int    `json:"issuers"`
	Budgets   int    `json:"budgets"`
	Prices    string `json:"pricing_version"`
	// Changes are the changed config paths with their values, secrets
	// redacted (admin.Change's String form).
	Changes []string `json:"changes"`
}

// Reload loads the file again and, when it is valid and changes no key
// the running process cannot apply (else the error wraps ErrNeedsRestart
// and names the keys), applies it: routes, providers, keys, prices,
// issuers and the other config.Reload keys to the gateway, limits to the
// budget tracker, the rest to the OnApply funcs. Then it records the
// reload, by audit.Actor(ctx): an error wrapping audit.ErrNotRecorded
// means the reload is applied but its event is not stored.
func (r *Reloader) Reload(ctx context.Context) (ReloadSummary, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := LoadSettings(r.path, func() (string, error) {
		if u, err := r.mockURL(); err == nil {
			return u, nil
		}
		return "", errMockAdded
	})
	if err != nil {
		return ReloadSummary{}, err
	}
	if r.override != nil {
		r.override(s.Config)
	}
	old := r.cfg.Load()
	if keys := append(config.RestartChanges(old, s.Config), r.gw.needsRestart(s.Config)...); len(keys) > 0 {
		// A refusal whose event is not stored is still a refusal: it does
		// not wrap audit.ErrNotRecorded, which callers read as applied.
		if err := r.recordRefusal(ctx, old, s.Config, keys); err != nil {
			r.log.Error("config reload refusal not audited", "err", err)
		}
		return ReloadSummary{}, fmt.Errorf("reload refused, the running config stays: %w: %s; restart the gateway to apply them",
			ErrNeedsRestart, strings.Join(keys, ", "))
	}
	if err := r.gw.Reload(s.Config, s.Verifier, s.Prices); err != nil {
		return ReloadSummary{}, err
	}
	r.limits.SetLimits(s.Limits)
	r.cfg.Store(s.Config)
	for _, f := range r.onApply {
		f(s.Config)
	}
	r.verifier.Store(s.Verifier)
	if s.KeysErr != nil {
		r.log.Warn("auth issuer keys not fetched; verifying with what the issuer has", "err", s.KeysErr)
	}
	if r.base != nil {
		r.startKeys(s.Verifier)
	}
	sum := ReloadSummary{Providers: len(s.Config.Providers), Models: len(s.Config.Models), Issuers: len(s.Config.Auth.Issuers),
		Budgets: len(s.Limits), Prices: s.Prices.Version}
	changes, err := admin.Diff(old, s.Config)
	if err != nil {
		return sum, fmt.Errorf("%w: diff config: %w", audit.ErrNotRecorded, err)
	}
	sum.Changes = make([]string, len(changes))
	for i, c := range changes {
		sum.Changes[i] = c.String()
	}
	r.log.Info("config reloaded", "providers", sum.Providers, "models", sum.Models, "issuers", sum.Issuers, "budgets", sum.Budgets,
		"changes", len(changes))
	return sum, r.record(ctx, old, s.Config, changes)
}

// record stores the audit events of a reload from before to after:
// config.reloaded with every change, and budget.changed with the budget
// changes when there are any.
func (r *Reloader) record(ctx context.Context, before, after *config.Config, changes []admin.Change) error {
	if r.audit == nil {
		return nil
	}
	actor, now := audit.Actor(ctx), time.Now()
	b, a := changeValues(changes)
	sum := summarize(changes)
	if len(changes) > 0 {
		sum = "applied: " + sum // a reload applies every change or none
	}
	err := r.audit.Record(ctx, audit.Event{Time: now, Actor: actor, Action: audit.ActionConfigReloaded, Target: r.path,
		Before: b, After: a, Summary: sum})
	var budgets []admin.Change
	for _, c := range changes {
		if strings.HasPrefix(c.Path, "budget") { // budgets, budget_overcommit
			budgets = append(budgets, c)
		}
	}
	if len(budgets) == 0 {
		return err
	}
	b, a = changeValues(budgets)
	return errors.Join(err, r.audit.Record(ctx, audit.Event{Time: now, Actor: actor, Action: audit.ActionBudgetChanged,
		Target: "budgets", Before: b, After: a, Summary: summarize(budgets)}))
}

// recordRefusal stores the audit event of a reload refused for keys: the
// changes it would have made, with the keys that need a restart in the
// summary.
func (r *Reloader) recordRefusal(ctx context.Context, before, after *config.Config, keys []string) error {
	if r.audit == nil {
		return nil
	}
	changes, err := admin.Diff(before, after)
	if err != nil {
		return fmt.Errorf("%w: diff config: %w", audit.ErrNotRecorded, err)
	}
	b, a := changeValues(changes)
	return r.audit.Record(ctx, audit.Event{Time: time.Now(), Actor: audit.Actor(ctx), Action: audit.ActionConfigRefused,
		Target: r.path, Before: b, After: a, Summary: "refused, needs a restart: " + strings.Join(keys, ", ") + "; not applied: " + summarize(changes)})
}

// changeValues returns the changes' values as two JSON objects keyed by
// path; a side without values is empty.
func changeValues(cs []admin.Change) (before, after json.RawMessage) {
	bm, am := map[string]any{}, map[string]any{}
	for _, c := range cs {
		if c.Before != nil {
			bm[c.Path] = c.Before
		}
		if c.After != nil {
			am[c.Path] = c.After
		}
	}
	enc := func(m map[string]any) json.RawMessage {
		if len(m) == 0 {
			return nil
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil
		}
		return b
	}
	return enc(bm), enc(am)
}

// summarize is the changes on one line, or "no changes".
func summarize(cs []admin.Change) string {
	if len(cs) == 0 {
		return "no changes"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

// startKeys runs v's key refresh loop (issuers with discovery_url or
// jwks_url) until the next reload replaces v or Run's ctx ends. r.mu is
// held.
func (r *Reloader) startKeys(v *auth.Verifier) {
	if r.stopKeys != nil {
		r.stopKeys()
	}
	ctx, cancel := context.WithCancel(r.base)
	r.stopKeys = cancel
	r.loops.Go(func() { _ = v.Run(ctx, r.log) })
}

// Run keeps the running verifier's remote issuer keys fresh and reloads on
// every signal from sigs (SIGHUP) until ctx ends; a refused file is logged
// and the running config stays.
func (r *Reloader) Run(ctx context.Context, sigs <-chan os.Signal) error {
	r.mu.Lock()
	r.base = ctx
	r.startKeys(r.verifier.Load())
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.stopKeys()
		r.mu.Unlock()
		r.loops.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sigs:
			_, err := r.Reload(audit.WithActor(ctx, audit.ActorSignal))
			switch {
			case errors.Is(err, audit.ErrNotRecorded):
				r.log.Error("config reloaded but not audited", "err", err)
			case err != nil:
				r.log.Error("config reload refused; the running config stays", "err", err)
			}
		}
	}
}

// Config returns the running config, for /admin/config.
func (r *Reloader) Config() *config.Config { return r.cfg.Load() }

// RegisterMetrics exports the running verifier's issuer key state on reg
// (metrics.RegisterAuth).
func (r *Reloader) RegisterMetrics(reg prometheus.Registerer) error {
	return metrics.RegisterAuth(reg, func() []metrics.IssuerKeys {
		st := r.verifier.Load().Stats()
		out := make([]metrics.IssuerKeys, len(st))
		for i, s := range st {
			out[i] = metrics.IssuerKeys{Issuer: s.Name, Keys: s.Keys, Fetches: s.Fetches, FetchErrors: s.FetchErrors}
		}
		return out
	})
}

// Verify checks an admin token with the running issuers.
func (r *Reloader) Verify(token []byte) (*auth.Principal, error) {
	return r.verifier.Load().Verify(token)
}
