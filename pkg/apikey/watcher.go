package apikey

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/kvwatch"
)

// entry is one key as the Watcher holds it.
type entry struct {
	hash      [sha256.Size]byte
	p         *auth.Principal // shared, immutable
	revoked   bool
	expiresAt time.Time
}

// Watcher keeps every API key in memory from a KV watch. Verify reads an
// immutable snapshot through an atomic pointer: no lock and no network on
// the request path.
type Watcher struct {
	cur     atomic.Pointer[map[[idLen]byte]*entry]
	ready   chan struct{}
	now     func() time.Time
	observe func(time.Duration)
}

// NewWatcher returns an empty Watcher; Run fills it. now defaults to
// time.Now; observe, when not nil, receives the propagation delay of each
// revocation seen after the first load (revoked_at to seen here).
func NewWatcher(now func() time.Time, observe func(time.Duration)) *Watcher {
	if now == nil {
		now = time.Now
	}
	w := &Watcher{ready: make(chan struct{}), now: now, observe: observe}
	w.cur.Store(&map[[idLen]byte]*entry{})
	return w
}

// Ready is closed once the keys present at start are loaded.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Verify returns the principal of an API key token, or ErrMalformed,
// ErrUnknown (no such id, or the wrong secret), ErrRevoked or ErrExpired.
// The principal is shared and must not be modified. It does not allocate.
func (w *Watcher) Verify(token []byte) (*auth.Principal, error) {
	id, secret, ok := split(token)
	if !ok {
		return nil, ErrMalformed
	}
	e := (*w.cur.Load())[id]
	sum := sha256.Sum256(secret)
	if e == nil {
		return nil, ErrUnknown
	}
	if subtle.ConstantTimeCompare(sum[:], e.hash[:]) != 1 {
		return nil, ErrUnknown
	}
	if e.revoked {
		return nil, ErrRevoked
	}
	if !e.expiresAt.IsZero() && !w.now().Before(e.expiresAt) {
		return nil, ErrExpired
	}
	return e.p, nil
}

// Run watches the bucket until ctx ends.
func (w *Watcher) Run(ctx context.Context, kv jetstream.KeyValue) error {
	pending := map[[idLen]byte]*entry{}
	return kvwatch.Run(ctx, kv, Bucket, w.ready,
		func(e jetstream.KeyValueEntry, loaded bool) bool { return w.apply(pending, e, loaded) },
		func() { w.publish(pending) })
}

// apply records one watch update in m and reports whether m changed.
func (w *Watcher) apply(m map[[idLen]byte]*entry, e jetstream.KeyValueEntry, loaded bool) bool {
	if !ValidID(e.Key()) {
		return false
	}
	var id [idLen]byte
	copy(id[:], e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		delete(m, id)
		return true
	}
	var r record
	if json.Unmarshal(e.Value(), &r) != nil || r.ID != e.Key() {
		return false
	}
	en := &entry{p: r.Principal(), revoked: !r.RevokedAt.IsZero(), expiresAt: r.ExpiresAt}
	if n, err := hex.Decode(en.hash[:], []byte(r.Hash)); err != nil || n != sha256.Size {
		return false
	}
	if loaded && en.revoked && w.observe != nil && r.RevokedAtUnixNano > 0 {
		if old := m[id]; old == nil || !old.revoked {
			w.observe(w.now().Sub(time.Unix(0, r.RevokedAtUnixNano)))
		}
	}
	m[id] = en
	return true
}

// publish swaps in a copy of m.
func (w *Watcher) publish(m map[[idLen]byte]*entry) {
	s := make(map[[idLen]byte]*entry, len(m))
	for k, v := range m {
		s[k] = v
	}
	w.cur.Store(&s)
}

// Len is the number of keys loaded, revoked ones included.
func (w *Watcher) Len() int { return len(*w.cur.Load()) }
