// Package revoke keeps the list of revoked tokens: a NATS KV bucket that
// `tollctl revoke` writes and every gateway watches, so a revoked key id
// (jti) or subject is refused everywhere within one propagation delay.
package revoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/kvwatch"
)

// Bucket is the KV bucket of revocations.
const Bucket = "tollgate_revoked"

// Kind is what a revocation names.
type Kind string

// Kinds of revocation.
const (
	KeyID   Kind = "jti" // one token (its jti claim)
	Subject Kind = "sub" // every token of a subject
)

// Entry is a revocation as stored in the bucket.
type Entry struct {
	Kind   Kind   `json:"kind"`
	Value  string `json:"value"`
	Reason string `json:"reason,omitempty"`
	// RevokedAtUnixNano is when it was written, to measure propagation.
	RevokedAtUnixNano int64 `json:"revoked_at_unix_nano"`
}

// EnsureBucket creates or opens the bucket.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	if replicas <= 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "revoked token ids and subjects", Replicas: replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("create kv bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// key encodes a revocation as a KV key: kind, then the value in hex so any
// byte is allowed.
func key(k Kind, value string) string {
	const hexd = "0123456789abcdef"
	var b strings.Builder
	b.WriteString(string(k))
	b.WriteByte('.')
	for i := 0; i < len(value); i++ {
		b.WriteByte(hexd[value[i]>>4])
		b.WriteByte(hexd[value[i]&15])
	}
	return b.String()
}

// Revoke writes a revocation.
func Revoke(ctx context.Context, kv jetstream.KeyValue, k Kind, value, reason string, now time.Time) error {
	if k != KeyID && k != Subject {
		return fmt.Errorf("revoke: unknown kind %q (want jti or sub)", k)
	}
	if value == "" {
		return errors.New("revoke: empty value")
	}
	b, _ := json.Marshal(Entry{Kind: k, Value: value, Reason: reason, RevokedAtUnixNano: now.UnixNano()})
	if _, err := kv.Put(ctx, key(k, value), b); err != nil {
		return fmt.Errorf("revoke %s %s: %w", k, value, err)
	}
	return nil
}

// Unrevoke removes a revocation.
func Unrevoke(ctx context.Context, kv jetstream.KeyValue, k Kind, value string) error {
	if err := kv.Delete(ctx, key(k, value)); err != nil {
		return fmt.Errorf("unrevoke %s %s: %w", k, value, err)
	}
	return nil
}

// List returns every revocation in the bucket.
func List(ctx context.Context, kv jetstream.KeyValue) ([]Entry, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list revocations: %w", err)
	}
	var out []Entry
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var en Entry
		if json.Unmarshal(e.Value(), &en) == nil {
			out = append(out, en)
		}
	}
	return out, nil
}

// set is an immutable snapshot of the revocations.
type set struct {
	jti, sub map[string]struct{}
}

// Watcher keeps the revocations in memory from a KV watch. Lookups read an
// immutable snapshot through an atomic pointer: no lock on the request path.
type Watcher struct {
	cur     atomic.Pointer[set]
	ready   chan struct{}
	now     func() time.Time
	observe func(time.Duration)
}

// NewWatcher returns an empty Watcher; Run fills it. observe, when not nil,
// receives the propagation delay of each new revocation (revoked_at to
// seen here).
func NewWatcher(now func() time.Time, observe func(time.Duration)) *Watcher {
	if now == nil {
		now = time.Now
	}
	w := &Watcher{ready: make(chan struct{}), now: now, observe: observe}
	w.cur.Store(&set{jti: map[string]struct{}{}, sub: map[string]struct{}{}})
	return w
}

// Ready is closed once the revocations present at start are loaded.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Revoked reports whether a token with this key id or subject is revoked.
func (w *Watcher) Revoked(keyID, subject string) bool {
	s := w.cur.Load()
	if len(s.jti) == 0 && len(s.sub) == 0 {
		return false
	}
	if _, ok := s.jti[keyID]; ok && keyID != "" {
		return true
	}
	_, ok := s.sub[subject]
	return ok && subject != ""
}

// Run watches the bucket until ctx ends.
func (w *Watcher) Run(ctx context.Context, kv jetstream.KeyValue) error {
	pending := map[string]Entry{} // key -> entry, the current contents
	return kvwatch.Run(ctx, kv, Bucket, w.ready, func(e jetstream.KeyValueEntry, loaded bool) bool {
		if e.Operation() != jetstream.KeyValuePut {
			delete(pending, e.Key())
			return true
		}
		var en Entry
		if json.Unmarshal(e.Value(), &en) != nil {
			return false
		}
		pending[e.Key()] = en
		if loaded && w.observe != nil && en.RevokedAtUnixNano > 0 {
			w.observe(w.now().Sub(time.Unix(0, en.RevokedAtUnixNano)))
		}
		return true
	}, func() { w.publish(pending) })
}

// publish swaps in a snapshot of entries.
func (w *Watcher) publish(entries map[string]Entry) {
	s := &set{jti: map[string]struct{}{}, sub: map[string]struct{}{}}
	for _, e := range entries {
		switch e.Kind {
		case KeyID:
			s.jti[e.Value] = struct{}{}
		case Subject:
			s.sub[e.Value] = struct{}{}
		}
	}
	w.cur.Store(s)
}
