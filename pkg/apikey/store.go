package apikey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/audit"
)

// Bucket is the KV bucket of API keys, keyed by key id.
const Bucket = "tollgate_keys"

// EnsureBucket creates or opens the bucket.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	if replicas <= 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "API keys: principals and secret hashes", Replicas: replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("create kv bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// kv is the part of jetstream.KeyValue the Store uses.
type kv interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

// recorder stores audit events; *audit.Recorder is one.
type recorder interface {
	Record(ctx context.Context, e audit.Event) error
}

// Store writes and lists API keys. Each change is one method, and each
// records an audit event (key.created, key.rotated, key.revoked) with the
// actor of its ctx (audit.WithActor). A change whose event could not be
// stored is made all the same: its error wraps audit.ErrNotRecorded, and
// Create and Rotate still return the new token.
type Store struct {
	kv    kv
	now   func() time.Time
	audit recorder // nil records nothing
}

// NewStore returns a Store on the bucket, recording its changes with rec
// (nil: none); now defaults to time.Now.
func NewStore(kv kv, now func() time.Time, rec recorder) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{kv: kv, now: now, audit: rec}
}

// record stores the audit event of a change to key k; before is the key
// as it was (nil for a new one). Neither side holds a secret or a hash.
func (s *Store) record(ctx context.Context, action string, before *Key, k Key, summary string) error {
	if s.audit == nil {
		return nil
	}
	var b json.RawMessage
	if before != nil {
		b, _ = json.Marshal(before)
	}
	a, _ := json.Marshal(k)
	return s.audit.Record(ctx, audit.Event{Time: s.now(), Actor: audit.Actor(ctx), Action: action,
		Target: "key:" + k.ID, Before: b, After: a, Summary: summary})
}

// Create stores a new key for spec's principal (Subject and Dept
// required; ID and the history fields are set here) and returns the token,
// to be shown once, and the stored Key.
func (s *Store) Create(ctx context.Context, spec Key) (string, Key, error) {
	if err := spec.check(); err != nil {
		return "", Key{}, err
	}
	id, err := newID()
	if err != nil {
		return "", Key{}, err
	}
	token, hash, err := newToken(id)
	if err != nil {
		return "", Key{}, err
	}
	k := spec
	k.ID, k.CreatedAt = id, s.now().UTC()
	k.RotatedAt, k.RevokedAt, k.RevokedAtUnixNano = time.Time{}, time.Time{}, 0
	b, err := json.Marshal(record{Key: k, Hash: hash})
	if err != nil {
		return "", Key{}, fmt.Errorf("encode api key %s: %w", id, err)
	}
	if _, err := s.kv.Create(ctx, id, b); err != nil {
		return "", Key{}, fmt.Errorf("store api key %s: %w", id, err)
	}
	return token, k, s.record(ctx, audit.ActionKeyCreated, nil, k,
		fmt.Sprintf("created key %s for %s (dept %s) by %s", id, k.Subject, k.Dept, k.CreatedBy))
}

// Rotate gives key id a new secret and returns the new token; the old one
// stops working once the gateways' watches deliver the change. The id and
// principal stay. A revoked key cannot be rotated.
func (s *Store) Rotate(ctx context.Context, id string) (string, Key, error) {
	var token string
	var before Key
	k, err := s.update(ctx, id, func(r *record) error {
		before = r.Key
		if !r.RevokedAt.IsZero() {
			return fmt.Errorf("rotate api key %s: %w", id, ErrRevoked)
		}
		t, hash, err := newToken(id)
		if err != nil {
			return err
		}
		token, r.Hash, r.RotatedAt = t, hash, s.now().UTC()
		return nil
	})
	if err != nil {
		return "", Key{}, err
	}
	return token, k, s.record(ctx, audit.ActionKeyRotated, &before, k, "rotated the secret of key "+id)
}

// Revoke marks key id revoked; every gateway refuses it once its watch
// delivers the change. Revoking a revoked key changes nothing.
func (s *Store) Revoke(ctx context.Context, id string) (Key, error) {
	var before Key
	k, err := s.update(ctx, id, func(r *record) error {
		before = r.Key
		if r.RevokedAt.IsZero() {
			now := s.now()
			r.RevokedAt, r.RevokedAtUnixNano = now.UTC(), now.UnixNano()
		}
		return nil
	})
	if err != nil {
		return Key{}, err
	}
	summary := "revoked key " + id
	if !before.RevokedAt.IsZero() {
		summary += " (was revoked already)"
	}
	return k, s.record(ctx, audit.ActionKeyRevoked, &before, k, summary)
}

// update applies change to the record of id with a compare-and-set on its
// revision, so concurrent changes do not overwrite each other.
func (s *Store) update(ctx context.Context, id string, change func(*record) error) (Key, error) {
	if !ValidID(id) {
		return Key{}, fmt.Errorf("api key %q: %w", id, ErrNotFound)
	}
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Key{}, fmt.Errorf("api key %s: %w", id, ErrNotFound)
	} else if err != nil {
		return Key{}, fmt.Errorf("read api key %s: %w", id, err)
	}
	var r record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Key{}, fmt.Errorf("decode api key %s: %w", id, err)
	}
	if err := change(&r); err != nil {
		return Key{}, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return Key{}, fmt.Errorf("encode api key %s: %w", id, err)
	}
	if _, err := s.kv.Update(ctx, id, b, e.Revision()); err != nil {
		return Key{}, fmt.Errorf("store api key %s: %w", id, err)
	}
	return r.Key, nil
}

// List returns every key, revoked ones included, oldest first. No hash or
// secret is in the result. It reads the bucket with one watch (every
// record's last value, then the end marker) rather than a lookup per key,
// so a list of thousands of keys is one stream of messages.
func (s *Store) List(ctx context.Context) ([]Key, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := []Key{}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("list api keys: the watch ended before the last record")
			}
			if e == nil { // every record read
				sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
				return out, nil
			}
			var r record
			if json.Unmarshal(e.Value(), &r) == nil {
				out = append(out, r.Key)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("list api keys: %w", ctx.Err())
		}
	}
}
