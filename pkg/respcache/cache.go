// Package respcache is the gateway's exact-match response cache, shared by
// every gateway replica through a NATS KV bucket (tollgate_cache).
//
// A request is cached under a Key: a hash of its endpoint, its tenant scope
// (dept and team, unless the model shares answers across scopes) and its
// normalized body (see NewKey). A hit is the whole answer: a non-stream
// body, or the SSE events of a stream, replayed one by one.
//
// The bucket's TTL (its max age) bounds every entry; each entry also
// carries its own expiry (the model's cache.ttl), checked on Get, so models
// with shorter TTLs share the bucket. Use BucketTTL for the bucket's.
//
// Get reads the bucket (one NATS round trip). Put never blocks: it encodes
// the entry (a copy, so the caller may reuse its buffers at once) and
// queues it; Run writes the queue to the bucket. When the queue is full the
// entry is dropped and counted.
//
// What the gateway does around it: cache only 200 answers (and complete
// streams) of models with cache.ttl set; skip Get when the client sends
// Cache-Control: no-cache (the fresh answer is still stored) and skip both
// Get and Put on no-store; mark hits in the usage event (cache_hit) and
// bill them by the model's cache.bill.
package respcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/config"
)

// DefaultBucket is the KV bucket of the cache.
const DefaultBucket = "tollgate_cache"

// ErrMiss is returned by Get when there is no usable entry.
var ErrMiss = errors.New("response cache miss")

// Options configure a Cache. Zero values take the defaults shown; TTL is
// required.
type Options struct {
	// Bucket is the KV bucket. Default DefaultBucket.
	Bucket string
	// TTL is the bucket's TTL: no entry lives longer. Required.
	TTL time.Duration
	// Replicas of the bucket. Default 1 (3 in a cluster).
	Replicas int
	// MaxBytes bounds the bucket; when it is full, writes fail (counted in
	// Stats.Failed) until entries expire. Default 1 GiB; -1: no bound.
	MaxBytes int64
	// Memory keeps the bucket in memory instead of files.
	Memory bool
	// Queue is the number of entries waiting to be written. Default 1024.
	Queue int
	// MaxEntryBytes is the largest encoded entry stored; larger ones are
	// dropped (Stats.TooLarge). Default 1 MiB minus 4 KiB, lowered to fit
	// the server's max payload.
	MaxEntryBytes int
	// Writers is the number of concurrent bucket writes Run makes. Default 2.
	Writers int
	// PutTimeout bounds one bucket write. Default 5s.
	PutTimeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Stats counts what the cache did since Open.
type Stats struct {
	Hits     int64 // Get found a live entry
	Misses   int64 // Get found nothing (or an expired or corrupt entry)
	Expired  int64 // of the misses, entries past their own TTL
	Corrupt  int64 // of the misses, entries that could not be decoded
	Errors   int64 // Get failed on the bucket (returned as an error, not a miss)
	Queued   int64 // entries Put accepted
	Stored   int64 // entries written to the bucket
	Dropped  int64 // entries lost: queue full, or still queued when Run stopped
	TooLarge int64 // entries over MaxEntryBytes, never queued
	Failed   int64 // bucket writes that failed
}

// Cache reads and writes cached answers. It is safe for concurrent use.
type Cache struct {
	kv       jetstream.KeyValue
	ttl      time.Duration // the bucket's
	now      func() time.Time
	maxEntry int
	writers  int
	timeout  time.Duration
	queue    chan job

	hits, misses, expired, corrupt, errs          atomic.Int64
	queued, stored, dropped, tooLarge, putsFailed atomic.Int64
}

// job is one encoded entry waiting to be written.
type job struct {
	key   string
	value []byte
}

// Open creates or updates the bucket and returns the cache. Run must be
// running for Put to store anything.
func Open(ctx context.Context, js jetstream.JetStream, o Options) (*Cache, error) {
	if o.TTL <= 0 {
		return nil, errors.New("response cache: ttl is required")
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 1 << 30
	}
	if o.Queue <= 0 {
		o.Queue = 1024
	}
	if o.MaxEntryBytes <= 0 {
		o.MaxEntryBytes = 1<<20 - 4<<10
	}
	if nc := js.Conn(); nc != nil && nc.MaxPayload() > 0 {
		o.MaxEntryBytes = min(o.MaxEntryBytes, int(nc.MaxPayload())-4<<10)
	}
	if o.Writers <= 0 {
		o.Writers = 2
	}
	if o.PutTimeout <= 0 {
		o.PutTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      o.Bucket,
		Description: "Tollgate response cache",
		History:     1,
		TTL:         o.TTL,
		MaxBytes:    o.MaxBytes,
		Storage:     storage,
		Replicas:    o.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("create cache bucket %s: %w", o.Bucket, err)
	}
	return &Cache{kv: kv, ttl: o.TTL, now: o.Now, maxEntry: o.MaxEntryBytes, writers: o.Writers,
		timeout: o.PutTimeout, queue: make(chan job, o.Queue)}, nil
}

// TTL returns the bucket's TTL (Options.TTL): no entry lives longer.
func (c *Cache) TTL() time.Duration { return c.ttl }

// BucketTTL returns the longest cache.ttl of models: the TTL the bucket
// needs. 0 means no model caches.
func BucketTTL(models []config.Model) time.Duration {
	var ttl time.Duration
	for _, m := range models {
		ttl = max(ttl, m.Cache.TTL)
	}
	return ttl
}

// Get returns the live entry stored under k, or ErrMiss. Other errors are
// the bucket's (treat them as a miss, and count or log them).
func (c *Cache) Get(ctx context.Context, k Key) (*Entry, error) {
	kve, err := c.kv.Get(ctx, k.String())
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		c.misses.Add(1)
		return nil, ErrMiss
	case err != nil:
		c.errs.Add(1)
		return nil, fmt.Errorf("get cached answer: %w", err)
	}
	e, err := decodeEntry(kve.Value())
	if err != nil {
		c.misses.Add(1)
		c.corrupt.Add(1)
		return nil, ErrMiss
	}
	if !c.now().Before(e.Expires) {
		c.misses.Add(1)
		c.expired.Add(1)
		return nil, ErrMiss
	}
	c.hits.Add(1)
	return e, nil
}

// Put stores e under k for ttl, asynchronously: it encodes e (setting its
// Created and Expires) and queues it without blocking. It reports whether
// the entry was queued; false means it was too large or the queue was full
// (both counted).
func (c *Cache) Put(k Key, ttl time.Duration, e *Entry) bool {
	if e.Size() > c.maxEntry {
		c.tooLarge.Add(1)
		return false
	}
	if len(c.queue) == cap(c.queue) {
		c.dropped.Add(1)
		return false
	}
	e.Created = c.now()
	e.Expires = e.Created.Add(ttl)
	v := appendEntry(make([]byte, 0, e.Size()), e)
	if len(v) > c.maxEntry {
		c.tooLarge.Add(1)
		return false
	}
	select {
	case c.queue <- job{key: k.String(), value: v}:
		c.queued.Add(1)
		return true
	default:
		c.dropped.Add(1)
		return false
	}
}

// Run writes queued entries to the bucket until ctx is done, then counts
// the entries still queued as dropped and returns nil.
func (c *Cache) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := 0; i < c.writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.write(ctx)
		}()
	}
	wg.Wait()
	for {
		select {
		case <-c.queue:
			c.dropped.Add(1)
		default:
			return nil
		}
	}
}

// write takes jobs off the queue until ctx is done.
func (c *Cache) write(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-c.queue:
			if ctx.Err() != nil {
				c.dropped.Add(1)
				return
			}
			pctx, cancel := context.WithTimeout(ctx, c.timeout)
			_, err := c.kv.Put(pctx, j.key, j.value)
			cancel()
			if err != nil {
				c.putsFailed.Add(1)
				continue
			}
			c.stored.Add(1)
		}
	}
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Expired: c.expired.Load(), Corrupt: c.corrupt.Load(),
		Errors: c.errs.Load(), Queued: c.queued.Load(), Stored: c.stored.Load(), Dropped: c.dropped.Load(),
		TooLarge: c.tooLarge.Load(), Failed: c.putsFailed.Load(),
	}
}
