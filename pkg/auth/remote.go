package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
)

// MaxJWKSBytes bounds a fetched discovery document or JWK Set, in bytes.
const MaxJWKSBytes = 1 << 20

// fetchTimeout bounds one discovery or JWKS request.
const fetchTimeout = 10 * time.Second

// ErrRedirectHost is returned for a discovery or JWKS response that
// redirects to another host: the keys must come from the host configured.
var ErrRedirectHost = errors.New("redirect to another host refused")

// remote fetches an issuer's keys from its identity provider. The fetch
// loop (Verifier.Run) is the only writer of the issuer's key set; Verify
// only loads it and, on an unknown kid, kicks the loop without waiting.
type remote struct {
	issuer       string
	discoveryURL string
	jwksURL      string
	allowHTTP    bool
	min, max     time.Duration
	pinned       algSet
	// static are the issuer's inline keys, kept in every fetched set.
	static []verKey
	client *http.Client
	clock  func() time.Time
	// kicks asks the loop for a refetch; capacity 1, sends never block.
	kicks chan struct{}

	fetches, failures atomic.Int64
	// mu guards the fields below; Verify never takes it.
	mu        sync.Mutex
	jwksURI   string // from discovery, or jwksURL
	lastFetch time.Time
	lastErr   error
}

func newRemote(c config.Issuer, pinned algSet, static []verKey, clock func() time.Time) (*remote, error) {
	for _, u := range []string{c.DiscoveryURL, c.JWKSURL} {
		if u == "" {
			continue
		}
		if err := config.CheckFetchURL(u, c.AllowHTTP); err != nil {
			return nil, err
		}
	}
	r := &remote{
		issuer: c.Issuer, discoveryURL: c.DiscoveryURL, jwksURL: c.JWKSURL, allowHTTP: c.AllowHTTP,
		min: c.JWKSRefreshMin, max: c.JWKSRefreshMax, pinned: pinned, static: static, clock: clock,
		kicks: make(chan struct{}, 1), jwksURI: c.JWKSURL,
	}
	if r.min <= 0 {
		r.min = config.DefaultJWKSRefreshMin
	}
	if r.max <= 0 {
		r.max = config.DefaultJWKSRefreshMax
	}
	if r.min > r.max {
		return nil, fmt.Errorf("jwks_refresh_min %s is above jwks_refresh_max %s", r.min, r.max)
	}
	r.client = &http.Client{Timeout: fetchTimeout, CheckRedirect: r.checkRedirect}
	return r, nil
}

func (r *remote) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("too many redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		return fmt.Errorf("%w: %s", ErrRedirectHost, req.URL.Host)
	}
	return config.CheckFetchURL(req.URL.String(), r.allowHTTP)
}

func (r *remote) kick() {
	select {
	case r.kicks <- struct{}{}:
	default:
	}
}

// run fetches the keys now and then refreshes them until ctx is done: after
// the interval the last response asked for, after jwks_refresh_min when a
// fetch failed, and on a kick (an unknown kid) once jwks_refresh_min has
// passed since the last fetch.
func (r *remote) run(ctx context.Context, is *issuer, log *slog.Logger) {
	for {
		// Kicks made before this fetch are answered by it.
		select {
		case <-r.kicks:
		default:
		}
		started := r.clock()
		next, err := r.refresh(ctx, is)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("jwks fetch failed, keeping the last keys", "issuer", is.name, "keys", is.keys.Load().n, "err", err)
			next = r.min
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			continue
		case <-r.kicks:
			t.Stop()
		}
		if wait := r.min - r.clock().Sub(started); wait > 0 {
			t.Reset(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// refresh fetches the key set once, swaps it in and returns when to fetch
// next. On an error the issuer keeps the keys it has.
func (r *remote) refresh(ctx context.Context, is *issuer) (time.Duration, error) {
	r.fetches.Add(1)
	ks, next, err := r.fetch(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
	if err != nil {
		r.failures.Add(1)
		if r.discoveryURL != "" {
			r.jwksURI = "" // discover again: the jwks_uri may have moved
		}
		return 0, err
	}
	is.keys.Store(ks)
	r.lastFetch = r.clock()
	return next, nil
}

func (r *remote) fetch(ctx context.Context) (*keySet, time.Duration, error) {
	r.mu.Lock()
	uri := r.jwksURI
	r.mu.Unlock()
	if uri == "" {
		var err error
		if uri, err = r.discover(ctx); err != nil {
			return nil, 0, err
		}
		r.mu.Lock()
		r.jwksURI = uri
		r.mu.Unlock()
	}
	body, h, err := r.get(ctx, uri)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch jwks: %w", err)
	}
	keys, err := parseJWKS(body, r.pinned, true)
	if err != nil {
		return nil, 0, fmt.Errorf("parse jwks from %s: %w", uri, err)
	}
	if len(keys) == 0 {
		return nil, 0, fmt.Errorf("jwks from %s has no key for the issuer's algorithms", uri)
	}
	ks, err := indexKeys(append(r.static[:len(r.static):len(r.static)], keys...))
	if err != nil {
		return nil, 0, fmt.Errorf("jwks from %s: %w", uri, err)
	}
	return ks, r.interval(h), nil
}

// discover reads the OpenID configuration and returns its jwks_uri, after
// checking that its issuer is the one configured (OpenID Connect Discovery
// 1.0, section 4.3).
func (r *remote) discover(ctx context.Context) (string, error) {
	body, _, err := r.get(ctx, r.discoveryURL)
	if err != nil {
		return "", fmt.Errorf("fetch discovery document: %w", err)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("parse discovery document: %w", err)
	}
	if doc.Issuer != r.issuer {
		return "", fmt.Errorf("discovery document names issuer %q, want %q", doc.Issuer, r.issuer)
	}
	if err := config.CheckFetchURL(doc.JWKSURI, r.allowHTTP); err != nil {
		return "", fmt.Errorf("discovery document jwks_uri: %w", err)
	}
	return doc.JWKSURI, nil
}

// get fetches url and returns a 200 response's body, at most MaxJWKSBytes.
func (r *remote) get(ctx context.Context, url string) ([]byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", url, err)
	}
	if len(body) > MaxJWKSBytes {
		return nil, nil, fmt.Errorf("%s: body is larger than %d bytes", url, MaxJWKSBytes)
	}
	return body, resp.Header, nil
}

// interval is the response's Cache-Control max-age clamped to
// [min, max]; max without one, min for no-cache or no-store.
func (r *remote) interval(h http.Header) time.Duration {
	for _, d := range strings.Split(h.Get("Cache-Control"), ",") {
		d = strings.ToLower(strings.TrimSpace(d))
		if d == "no-cache" || d == "no-store" {
			return r.min
		}
		if v, ok := strings.CutPrefix(d, "max-age="); ok {
			secs, err := strconv.ParseInt(v, 10, 64)
			if err != nil || secs < 0 {
				continue
			}
			return min(max(time.Duration(min(secs, 1<<32))*time.Second, r.min), r.max)
		}
	}
	return r.max
}

// IssuerStats is the key state of one issuer, for metrics and /readyz.
type IssuerStats struct {
	// Name is the issuer's configured name.
	Name string
	// Remote is true for an issuer with discovery_url or jwks_url.
	Remote bool
	// Keys is the number of keys the issuer verifies with now.
	Keys int
	// Fetches and FetchErrors count key fetches and the failed ones since
	// start.
	Fetches, FetchErrors int64
	// LastFetch is when keys were last fetched; zero before the first.
	LastFetch time.Time
	// LastError is the last fetch's error; nil when it succeeded.
	LastError error
}

// Stats returns the key state of every issuer, in no particular order. It
// is safe to call at any time (say, from a metrics collector).
func (v *Verifier) Stats() []IssuerStats {
	out := make([]IssuerStats, 0, len(v.issuers))
	for _, is := range v.issuers {
		s := IssuerStats{Name: is.name, Keys: is.keys.Load().n}
		if r := is.remote; r != nil {
			s.Remote = true
			s.Fetches, s.FetchErrors = r.fetches.Load(), r.failures.Load()
			r.mu.Lock()
			s.LastFetch, s.LastError = r.lastFetch, r.lastErr
			r.mu.Unlock()
		}
		out = append(out, s)
	}
	return out
}

// NotReady returns, for every issuer without any key, why: its tokens are
// refused until a fetch succeeds. Nil means every issuer can verify.
func (v *Verifier) NotReady() []string {
	var out []string
	for _, s := range v.Stats() {
		if s.Keys > 0 {
			continue
		}
		reason := fmt.Sprintf("auth issuer %q has no keys", s.Name)
		switch {
		case s.LastError != nil:
			reason += ": " + s.LastError.Error()
		case s.Remote && s.Fetches == 0:
			reason += ": not fetched yet"
		}
		out = append(out, reason)
	}
	return out
}

// Run fetches the keys of every issuer configured with discovery_url or
// jwks_url, then refreshes them in the background until ctx is done, and
// returns nil then. An issuer whose provider is unreachable keeps its last
// keys (or its jwks_file fallback); log gets one warning per failed fetch.
// Without such issuers Run just waits for ctx.
func (v *Verifier) Run(ctx context.Context, log *slog.Logger) error {
	var wg sync.WaitGroup
	for _, is := range v.issuers {
		if is.remote == nil {
			continue
		}
		wg.Go(func() { is.remote.run(ctx, is, log) })
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// Refresh fetches the keys of every remote issuer once, now, and returns
// the errors joined. Run calls it in its loops; it is here for a start-up
// that wants to wait for the first keys.
func (v *Verifier) Refresh(ctx context.Context) error {
	var errs []error
	for _, is := range v.issuers {
		if is.remote == nil {
			continue
		}
		if _, err := is.remote.refresh(ctx, is); err != nil {
			errs = append(errs, fmt.Errorf("auth issuer %q: %w", is.name, err))
		}
	}
	return errors.Join(errs...)
}
