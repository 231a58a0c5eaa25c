package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// PresenceBucket is the KV bucket where every gateway announces itself: one
// key per live gateway (its random id), the value its TTL in milliseconds.
const PresenceBucket = "tollgate_ratelimit_presence"

// DefaultPresenceTTL is how long a gateway counts as live after its last
// announcement (PresenceOptions.TTL).
const DefaultPresenceTTL = 15 * time.Second

// Share is the number N of live gateways each limit is divided by. The zero
// value, and a nil *Share, count one gateway. It is safe for concurrent
// use: Allow loads it with one atomic read.
type Share struct{ n atomic.Int64 }

// Gateways returns N, at least 1.
func (s *Share) Gateways() int64 {
	if s == nil {
		return 1
	}
	return max(s.n.Load(), 1)
}

// Set sets N (values under 1 count as 1). Presence calls it; tests may too.
func (s *Share) Set(n int64) { s.n.Store(n) }

// presenceKV is what Presence uses of the presence bucket.
type presenceKV interface {
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
	WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

// kvManager is what EnsurePresenceBucket uses of JetStream.
type kvManager interface {
	CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error)
}

// EnsurePresenceBucket creates the presence bucket, or updates its
// configuration. An entry not renewed within ttl ages out of the bucket.
func EnsurePresenceBucket(ctx context.Context, js kvManager, replicas int, ttl time.Duration) (jetstream.KeyValue, error) {
	if replicas <= 0 {
		replicas = 1
	}
	if ttl <= 0 {
		ttl = DefaultPresenceTTL
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      PresenceBucket,
		Description: "Tollgate gateways dividing rate limits: one entry per live gateway",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.MemoryStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", PresenceBucket, err)
	}
	return kv, nil
}

// PresenceOptions configure a Presence. Zero values take the defaults shown.
type PresenceOptions struct {
	// ID names this gateway in the bucket. Default: random, new at every
	// start (a restarted gateway is a new one; its old entry ages out).
	ID string
	// TTL is how long a gateway counts as live after its last
	// announcement; each gateway renews its entry every TTL/3. Default
	// DefaultPresenceTTL.
	TTL time.Duration
	// Logger logs when announcements start and stop failing. Default: discard.
	Logger *slog.Logger
	// Now is the clock that ages other gateways' announcements. Default
	// time.Now.
	Now func() time.Time
}

// Presence announces this gateway in the presence bucket and watches the
// others, keeping Share at the number of live gateways, itself included.
//
// A gateway that stops deletes its entry, so the others take its share
// back at once; one that dies is dropped once its last announcement is
// older than its TTL (seen at the next renewal, so within TTL + TTL/3).
// While this gateway cannot announce itself (NATS unreachable), and for
// one TTL after it can again (so that every live gateway has re-announced),
// nobody is dropped for age: the last known N stays, never a larger share
// than the last view allowed.
type Presence struct {
	kv    presenceKV
	o     PresenceOptions
	share Share
	// Only Run's goroutine (and StartPresence before it) touches these.
	w       jetstream.KeyWatcher
	seen    map[string]peer
	okSince int64 // unix ns since renewals succeed; 0 while they fail
	// Read by metrics.
	errs  atomic.Uint64
	stale atomic.Bool
}

// peer is another gateway's last announcement, as received here.
type peer struct {
	at  int64 // unix ns received
	ttl int64 // ns, from its value
}

// StartPresence announces this gateway, reads the entries of the others
// and returns with Share set; ctx bounds the watch, so pass the Presence's
// lifetime and then call Run with it.
func StartPresence(ctx context.Context, kv presenceKV, o PresenceOptions) (*Presence, error) {
	if o.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.ID = hex.EncodeToString(b[:])
	}
	if o.TTL <= 0 {
		o.TTL = DefaultPresenceTTL
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p := &Presence{kv: kv, o: o, seen: map[string]peer{}}
	p.share.Set(1)
	if err := p.announce(ctx); err != nil {
		return nil, err
	}
	if err := p.watch(ctx); err != nil {
		return nil, err
	}
	p.okSince = p.o.Now().UnixNano()
	p.count(p.okSince)
	return p, nil
}

// Share returns the Share this Presence keeps; give it to every Limiter
// (Options.Share). A nil Presence returns nil: one gateway.
func (p *Presence) Share() *Share {
	if p == nil {
		return nil
	}
	return &p.share
}

// ID returns this gateway's id in the bucket.
func (p *Presence) ID() string { return p.o.ID }

// Errors returns how many announcements failed (0 for a nil Presence).
func (p *Presence) Errors() uint64 {
	if p == nil {
		return 0
	}
	return p.errs.Load()
}

// Stale reports whether the last announcement failed, so that N is held at
// its last known value (false for a nil Presence).
func (p *Presence) Stale() bool { return p != nil && p.stale.Load() }

// Run renews this gateway's entry and follows the others' until ctx ends,
// then deletes the entry (within 2s) so the others take its share back.
func (p *Presence) Run(ctx context.Context) error {
	t := time.NewTicker(p.o.TTL / 3)
	defer t.Stop()
	for {
		var updates <-chan jetstream.KeyValueEntry
		if p.w != nil {
			updates = p.w.Updates()
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := p.kv.Delete(dctx, p.o.ID); err != nil {
				return fmt.Errorf("delete presence %s: %w", p.o.ID, err)
			}
			return nil
		case e, ok := <-updates:
			if !ok {
				p.w = nil // reopened at the next tick
				continue
			}
			p.apply(e, p.o.Now().UnixNano())
		case <-t.C:
			p.renew(ctx)
		}
	}
}

// renew announces this gateway again, reopens a closed watch and recounts.
func (p *Presence) renew(ctx context.Context) {
	now := p.o.Now().UnixNano()
	actx, cancel := context.WithTimeout(ctx, p.o.TTL/3)
	err := p.announce(actx)
	if err == nil && p.w == nil {
		err = p.watch(ctx)
	}
	cancel()
	switch {
	case err != nil:
		p.errs.Add(1)
		if p.okSince != 0 || !p.stale.Load() {
			p.o.Logger.Warn("rate limit presence not renewed; keeping the last known gateway count",
				"gateways", p.share.Gateways(), "err", err)
		}
		p.okSince = 0
		p.stale.Store(true)
	case p.okSince == 0:
		p.okSince = now
		p.stale.Store(false)
		p.o.Logger.Info("rate limit presence renewed again", "gateways", p.share.Gateways())
	}
	p.count(now)
}

func (p *Presence) announce(ctx context.Context) error {
	if _, err := p.kv.Put(ctx, p.o.ID, strconv.AppendInt(nil, p.o.TTL.Milliseconds(), 10)); err != nil {
		return fmt.Errorf("announce gateway %s: %w", p.o.ID, err)
	}
	return nil
}

// watch opens the watch and applies the current entries.
func (p *Presence) watch(ctx context.Context) error {
	w, err := p.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", PresenceBucket, err)
	}
	timeout := time.NewTimer(p.o.TTL)
	defer timeout.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("presence watch closed")
			}
			if e == nil { // the current entries are all in
				p.w = w
				return nil
			}
			p.apply(e, p.o.Now().UnixNano())
		case <-timeout.C:
			_ = w.Stop()
			return fmt.Errorf("watch %s: no initial values within %s", PresenceBucket, p.o.TTL)
		}
	}
}

// apply records one entry (or its deletion) received at now.
func (p *Presence) apply(e jetstream.KeyValueEntry, now int64) {
	if e == nil || e.Key() == p.o.ID {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(p.seen, e.Key())
		p.count(now)
		return
	}
	ttl := int64(p.o.TTL)
	if ms, err := strconv.ParseInt(string(e.Value()), 10, 64); err == nil && ms > 0 {
		ttl = ms * int64(time.Millisecond)
	}
	p.seen[e.Key()] = peer{at: now, ttl: ttl}
	p.count(now)
}

// count sets Share to this gateway plus the others still live. Gateways
// are dropped for age only after renewals have succeeded for one TTL.
func (p *Presence) count(now int64) {
	expire := p.okSince != 0 && now-p.okSince >= int64(p.o.TTL)
	for id, pr := range p.seen {
		if expire && now-pr.at > pr.ttl {
			delete(p.seen, id)
		}
	}
	p.share.Set(int64(1 + len(p.seen)))
}

// RegisterMetrics exports the gateway count N this gateway divides its rate
// limits by, and the presence announcements that failed. p may be nil
// (rate_limit.local): N is then 1.
func RegisterMetrics(reg prometheus.Registerer, p *Presence) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_ratelimit_gateways",
			Help: "Live gateways this gateway sees: each enforces rpm/N and tpm/N of every rate limit (1: the limits are its own)."},
			func() float64 { return float64(p.Share().Gateways()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_ratelimit_presence_errors_total",
			Help: "Rate limit presence announcements that failed (NATS unreachable); the last known gateway count stays meanwhile."},
			func() float64 { return float64(p.Errors()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_ratelimit_presence_stale",
			Help: "1 while the last rate limit presence announcement failed and tollgate_ratelimit_gateways is held at its last known value."},
			func() float64 {
				if p.Stale() {
					return 1
				}
				return 0
			}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register rate limit metrics: %w", err)
		}
	}
	return nil
}

// Announce ensures the presence bucket (replicas, ttl), announces this
// gateway in it and runs its renewals in g until ctx ends, so that every
// gateway divides rate limits by the live gateways (docs/budgets.md: rate
// limits across gateways). A renewal loop that ends with an error is
// logged: the entry then ages out after its TTL.
func Announce(ctx context.Context, g interface{ Go(func() error) }, js kvManager, replicas int, ttl time.Duration, log *slog.Logger) (*Presence, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := EnsurePresenceBucket(sctx, js, replicas, ttl)
	if err != nil {
		return nil, err
	}
	p, err := StartPresence(ctx, kv, PresenceOptions{TTL: ttl, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("rate limits divided across gateways", "gateways", p.Share().Gateways(), "id", p.ID())
	g.Go(func() error {
		if err := p.Run(ctx); err != nil {
			log.Warn("rate limit presence not withdrawn", "err", err)
		}
		return nil
	})
	return p, nil
}
