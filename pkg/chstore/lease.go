package chstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errLeaseLost ends the loading of a Loader whose lease ran out or was
// taken; it goes back to standing by.
var errLeaseLost = errors.New("analytics lease lost")

// lease lets one Loader per durable load at a time. It is a key in a NATS
// KV bucket whose TTL is the lease's: the holder created the key and
// renews it (an update expecting its last revision) every ttl/6, so when a
// holder dies or is cut off, the key expires and a standby's create
// succeeds. A holder writes to ClickHouse only while it surely holds the
// lease for long enough to finish the write (see held), so two holders
// never write at once.
type lease struct {
	js    jetstream.JetStream
	cfg   jetstream.KeyValueConfig
	kv    jetstream.KeyValue
	key   string
	owner []byte
	ttl   time.Duration
	base  time.Time    // monotonic origin of until
	until atomic.Int64 // held until base+until; 0 when not held

	mu   sync.Mutex // guards rev and stop
	rev  uint64
	stop func()
}

// newLease opens (creating if needed) the lease bucket.
func newLease(ctx context.Context, js jetstream.JetStream, bucket, key string, ttl time.Duration, replicas int) (*lease, error) {
	host, _ := os.Hostname()
	owner := host + "/" + strconv.Itoa(os.Getpid()) + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ls := &lease{js: js, key: key, owner: []byte(owner), ttl: ttl, base: time.Now(), cfg: jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "Tollgate analytics: which loader loads each durable",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.MemoryStorage,
		Replicas:    replicas,
	}}
	if err := ls.open(ctx); err != nil {
		return nil, err
	}
	return ls, nil
}

// open creates the bucket, or updates its settings, and keeps its handle.
func (ls *lease) open(ctx context.Context) error {
	kv, err := ls.js.CreateOrUpdateKeyValue(ctx, ls.cfg)
	if err != nil {
		return fmt.Errorf("open lease bucket %s: %w", ls.cfg.Bucket, err)
	}
	ls.kv = kv
	return nil
}

// tryAcquire creates the key, reporting false when another holder has it.
// On success it starts renewing until release.
func (ls *lease) tryAcquire(ctx context.Context) (bool, error) {
	sent := time.Since(ls.base)
	rev, err := ls.kv.Create(ctx, ls.key, ls.owner)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
			errors.Is(err, jetstream.ErrNoStreamResponse) {
			_ = ls.open(ctx) // deleted by hand: bring it back for the next try
		}
		return false, fmt.Errorf("acquire lease %s: %w", ls.key, err)
	}
	ls.until.Store(int64(sent + ls.ttl))
	renewCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	ls.mu.Lock()
	ls.rev = rev
	ls.stop = func() { cancel(); wg.Wait() }
	ls.mu.Unlock()
	wg.Go(func() { ls.renew(renewCtx) })
	return true, nil
}

// renew updates the key every ttl/6 until ctx is cancelled or another
// holder is found.
func (ls *lease) renew(ctx context.Context) {
	t := time.NewTicker(ls.ttl / 6)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Since(ls.base)
		c, cancel := context.WithTimeout(ctx, ls.ttl/6)
		ls.mu.Lock()
		rev, err := ls.kv.Update(c, ls.key, ls.owner, ls.rev)
		if err == nil {
			ls.rev = rev
		}
		ls.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			ls.until.Store(int64(sent + ls.ttl))
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			ls.until.Store(0) // expired, then taken or deleted: not ours any more
			return
		}
		// Other errors (NATS unreachable): the lease runs out unless a
		// later renewal gets through.
	}
}

// held reports whether the lease is held for at least margin more.
func (ls *lease) held(margin time.Duration) bool {
	return time.Since(ls.base)+margin < time.Duration(ls.until.Load())
}

// release stops renewing and deletes the key if it is still ours, so a
// standby takes over at once.
func (ls *lease) release(ctx context.Context) {
	ls.mu.Lock()
	stop, rev := ls.stop, ls.rev
	ls.stop = nil
	ls.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	if ls.held(0) {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = ls.kv.Delete(c, ls.key, jetstream.LastRevision(rev)) // else it expires
	}
	ls.until.Store(0)
}
