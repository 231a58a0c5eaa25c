// Package owner records which principal created each file and batch the
// gateway passed to its files_provider (issue #41). The gateway calls the
// provider under one credential, so the provider cannot tell tenants
// apart: without this record any tenant could list, read, delete or
// cancel another's objects, or have a model read another's file by id.
//
// Invariants:
//   - An object belongs to the scope that created it: its department and
//     subject, both as the token states them. Teammates do not share
//     objects (the conservative default): a team's service account that
//     needs to share creates them under one subject.
//   - The record is written, keyed by the provider's id from its answer,
//     before the creator gets that answer, in the NATS KV bucket Bucket:
//     it survives a restart and holds on every gateway replica. A record
//     is never overwritten (Create, not Put): a provider's ids are fresh.
//   - Every gateway keeps the bucket in memory from a KV watch; a lookup
//     that misses memory asks the bucket once (Owner), so an object
//     created on another replica a moment ago is found. A listing reads
//     memory only (Known).
//   - An object without a record (created before the gateway kept them,
//     or directly at the provider) belongs to no tenant: the gateway
//     answers 404 for it, as for an id that does not exist.
//   - A deleted file's record is removed (Forget); batches keep theirs.
package owner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/kvwatch"
)

// Bucket is the KV bucket of owner records.
const Bucket = "tollgate_owners"

// Kind is the kind of object a record is about.
type Kind string

// Kinds of object.
const (
	File  Kind = "file"
	Batch Kind = "batch"
)

// Owner is who created an object, as stored in the bucket.
type Owner struct {
	Dept    string `json:"dept"`
	Subject string `json:"sub"`
	// CreatedAtUnixNano is when the record was written.
	CreatedAtUnixNano int64 `json:"created_at_unix_nano"`
}

// Is reports whether the owner is the principal of dept and subject.
func (o Owner) Is(dept, subject string) bool { return o.Dept == dept && o.Subject == subject }

// bucketMaker creates or opens a KV bucket; jetstream.JetStream is one.
type bucketMaker interface {
	CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error)
}

// EnsureBucket creates or opens the bucket with replicas replicas (at
// least 1), on file storage.
func EnsureBucket(ctx context.Context, js bucketMaker, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "the principal that created each file and batch",
		Replicas: max(replicas, 1), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("create kv bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// key encodes an object as a KV key: its kind, then its id in hex, so any
// id a client sends is a valid key.
func key(k Kind, id string) string {
	const hexd = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(k) + 1 + 2*len(id))
	b.WriteString(string(k))
	b.WriteByte('.')
	for i := 0; i < len(id); i++ {
		b.WriteByte(hexd[id[i]>>4])
		b.WriteByte(hexd[id[i]&15])
	}
	return b.String()
}

// Store keeps the owner records: written through to the bucket, read from
// memory filled by a KV watch (Run). It is safe for concurrent use; reads
// take no lock shared with other readers.
type Store struct {
	kv    jetstream.KeyValue
	m     sync.Map // key -> Owner: the bucket's contents, and this gateway's writes
	ready chan struct{}
	now   func() time.Time
}

// NewStore returns a Store on kv (EnsureBucket's); Run fills it. now
// defaults to time.Now.
func NewStore(kv jetstream.KeyValue, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{kv: kv, ready: make(chan struct{}), now: now}
}

// Ready is closed once the records present at start are loaded.
func (s *Store) Ready() <-chan struct{} { return s.ready }

// Run watches the bucket until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	return kvwatch.Run(ctx, s.kv, Bucket, s.ready, func(e jetstream.KeyValueEntry, _ bool) bool {
		if e.Operation() != jetstream.KeyValuePut {
			s.m.Delete(e.Key())
			return true
		}
		var o Owner
		if json.Unmarshal(e.Value(), &o) != nil {
			return false
		}
		s.m.Store(e.Key(), o)
		return true
	}, func() {})
}

// ErrRecorded is returned by Record for an object that has an owner.
var ErrRecorded = errors.New("the object already has an owner")

// Record writes o as the owner of the object, once: an object that has a
// record keeps it (ErrRecorded).
func (s *Store) Record(ctx context.Context, k Kind, id string, o Owner) error {
	if o.CreatedAtUnixNano == 0 {
		o.CreatedAtUnixNano = s.now().UnixNano()
	}
	b, _ := json.Marshal(o) // strings and an integer: cannot fail
	kk := key(k, id)
	if _, err := s.kv.Create(ctx, kk, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("record owner of %s %s: %w", k, id, ErrRecorded)
		}
		return fmt.Errorf("record owner of %s %s: %w", k, id, err)
	}
	s.m.Store(kk, o)
	return nil
}

// Known returns the object's owner from memory only: for listings, which
// look up every object of a page.
func (s *Store) Known(k Kind, id string) (Owner, bool) {
	v, ok := s.m.Load(key(k, id))
	if !ok {
		return Owner{}, false
	}
	return v.(Owner), true
}

// Owner returns the object's owner: from memory, else from the bucket (a
// record written on another gateway that this one's watch has not
// delivered yet). ok is false for an object without a record; err is set
// only when the bucket could not be read.
func (s *Store) Owner(ctx context.Context, k Kind, id string) (o Owner, ok bool, err error) {
	if o, ok := s.Known(k, id); ok {
		return o, true, nil
	}
	e, err := s.kv.Get(ctx, key(k, id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Owner{}, false, nil
	case err != nil:
		return Owner{}, false, fmt.Errorf("read owner of %s %s: %w", k, id, err)
	}
	if json.Unmarshal(e.Value(), &o) != nil {
		return Owner{}, false, nil
	}
	return o, true, nil
}

// Forget removes the object's record (a deleted file).
func (s *Store) Forget(ctx context.Context, k Kind, id string) error {
	kk := key(k, id)
	s.m.Delete(kk)
	if err := s.kv.Delete(ctx, kk); err != nil {
		return fmt.Errorf("forget owner of %s %s: %w", k, id, err)
	}
	return nil
}

// group runs background loops; *errgroup.Group is one. Its owner stops
// them by ending the ctx they were started with.
type group interface {
	Go(f func() error)
}

// Start ensures the bucket, runs a Store's watch in g until ctx ends, and
// returns the Store once its first load is done (within 30 s), so that no
// tenant's object reads as unowned at start.
func Start(ctx context.Context, g group, js bucketMaker, replicas int) (*Store, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := EnsureBucket(sctx, js, replicas)
	if err != nil {
		return nil, err
	}
	s := NewStore(kv, time.Now)
	g.Go(func() error { return s.Run(ctx) })
	select {
	case <-s.Ready():
		return s, nil
	case <-sctx.Done():
		return nil, errors.New("file and batch owners did not load within 30s")
	}
}
