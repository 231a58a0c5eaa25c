// Package ratelimit enforces per-principal request and token rates (rpm,
// tpm) with token buckets kept in local memory.
//
// Each key owns two buckets: one of capacity rpm refilled at rpm per minute,
// one of capacity tpm refilled at tpm per minute. A new key starts full, so a
// principal may burst a whole minute's allowance at once. The limits are
// passed on every call, so a principal's rpm and tpm can come from its token
// and change between calls; a bucket above a lowered capacity is clamped to
// it.
//
// Across gateways (issue #13): with a Share (Options.Share) that counts N
// live gateways (Presence keeps it from a NATS KV bucket), each gateway
// enforces limit/N: both capacity and refill are divided, so the gateways
// together admit at most the limit, plus one request per gateway when the
// share is below one request (a request passes once its bucket is full and
// leaves it in debt, as large token counts do). The check stays local: one
// atomic load of N, no network. Without a Share, N is 1 and every limit is
// this gateway's alone.
//
// The table is sharded so that no lock is shared by every request, and
// bounded: keys idle longer than IdleAfter are evicted (a bucket idle for a
// minute is full again, divided or not, so evicting it changes nothing), and
// when a shard is still full the least recently used of a small sample is
// evicted.
package ratelimit

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"
)

const (
	shardCount = 64
	// sampleSize is how many entries a full shard looks at to find one to evict.
	sampleSize = 8
)

// Options configure a Limiter. Zero values take the defaults shown.
type Options struct {
	// MaxKeys bounds the number of keys kept. Default 1<<20.
	MaxKeys int
	// IdleAfter is how long a key must be unused before it may be evicted.
	// Default 2m; values under 1m are raised to 1m so that an evicted bucket
	// was always full again.
	IdleAfter time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Share divides every limit by the number of gateways it counts.
	// Default nil: this gateway enforces every limit alone.
	Share *Share
}

// Limiter holds the buckets of every key. It is safe for concurrent use.
type Limiter struct {
	seed      maphash.Seed
	now       func() time.Time
	share     *Share // nil: N = 1
	idleAfter int64  // ns
	perShard  int
	shards    [shardCount]shard
}

// shard is one slice of the key space; mu guards m and lastSweep.
type shard struct {
	mu        sync.Mutex
	m         map[string]bucket
	lastSweep int64
	_         [40]byte // keep shards on separate cache lines
}

// bucket holds the levels of one key's request and token buckets.
type bucket struct {
	reqs   float64 // requests available
	tokens float64 // tokens available; negative after a Charge beyond it
	last   int64   // unix ns of the last refill
}

// New returns a Limiter configured by o.
func New(o Options) *Limiter {
	if o.MaxKeys <= 0 {
		o.MaxKeys = 1 << 20
	}
	if o.IdleAfter <= 0 {
		o.IdleAfter = 2 * time.Minute
	}
	if o.IdleAfter < time.Minute {
		o.IdleAfter = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Limiter{
		seed:      maphash.MakeSeed(),
		now:       o.Now,
		share:     o.Share,
		idleAfter: int64(o.IdleAfter),
		perShard:  max(1, o.MaxKeys/shardCount),
	}
	for i := range l.shards {
		l.shards[i].m = make(map[string]bucket)
	}
	return l
}

// Allow reports whether key may make one request that uses tokens tokens
// under limits of rpm requests and tpm tokens per minute (0 or less means
// unlimited), and if so takes them from its buckets. When it may not,
// nothing is taken and retryAfter says how long until it may. rpm and tpm
// are the global limits: this gateway enforces rpm/N and tpm/N (Share).
//
// A request larger than tpm/N passes once the token bucket is full and then
// leaves it in debt, so that large requests are slowed, not refused forever;
// so does a request when rpm/N is below one.
// tokens is usually an estimate; Charge corrects it once the real count is
// known.
func (l *Limiter) Allow(key string, rpm, tpm, tokens int64) (ok bool, retryAfter time.Duration) {
	if rpm <= 0 && tpm <= 0 {
		return true, 0
	}
	n := float64(l.share.Gateways())
	crpm, ctpm := float64(rpm)/n, float64(tpm)/n // this gateway's share
	now := l.now().UnixNano()
	s := l.shard(key)
	s.mu.Lock()
	b, found := s.m[key]
	if !found {
		b = bucket{reqs: max(crpm, 0), tokens: max(ctpm, 0), last: now}
	}
	b.refill(now, crpm, ctpm)
	var wait float64 // minutes
	if rpm > 0 {
		if need := math.Min(1, crpm); b.reqs < need {
			wait = (need - b.reqs) / crpm
		}
	}
	if tpm > 0 && tokens > 0 {
		need := math.Min(float64(tokens), ctpm)
		if b.tokens < need {
			wait = math.Max(wait, (need-b.tokens)/ctpm)
		}
	}
	if wait == 0 {
		if rpm > 0 {
			b.reqs--
		}
		if tpm > 0 && tokens > 0 {
			b.tokens -= float64(tokens)
		}
	}
	if found {
		s.m[key] = b
	} else {
		s.insert(l, key, b, now)
	}
	s.mu.Unlock()
	if wait > 0 {
		return false, time.Duration(math.Ceil(wait * float64(time.Minute)))
	}
	return true, 0
}

// Charge adds tokens (negative to refund) to what key has used of its tpm
// bucket, without checking: the gateway calls it with actual minus estimated
// tokens once a response's usage is known. A refund never fills the bucket
// above this gateway's share of tpm. Unknown keys and tpm <= 0 are ignored.
func (l *Limiter) Charge(key string, tpm, tokens int64) {
	if tpm <= 0 || tokens == 0 {
		return
	}
	s := l.shard(key)
	s.mu.Lock()
	if b, ok := s.m[key]; ok {
		// No refill here: Allow refills from b.last, and the request bucket
		// (whose rpm is unknown here) must not lose what accrued.
		b.tokens = math.Min(b.tokens-float64(tokens), float64(tpm)/float64(l.share.Gateways()))
		s.m[key] = b
	}
	s.mu.Unlock()
}

// Share returns the Share the limiter divides by (Options.Share), nil
// when it enforces its limits alone.
func (l *Limiter) Share() *Share { return l.share }

// Len returns the number of keys currently kept.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

func (l *Limiter) shard(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)%shardCount]
}

// refill adds what accrued since b.last, capped at the capacities (per
// minute: rpm requests, tpm tokens). A limit of 0 leaves its bucket
// unchanged.
func (b *bucket) refill(now int64, rpm, tpm float64) {
	elapsed := now - b.last
	if elapsed < 0 {
		elapsed = 0 // clock stepped back: refill nothing
	}
	minutes := float64(elapsed) / float64(time.Minute)
	if rpm > 0 {
		b.reqs = math.Min(b.reqs+minutes*rpm, rpm)
	}
	if tpm > 0 {
		b.tokens = math.Min(b.tokens+minutes*tpm, tpm)
	}
	b.last = now
}

// insert adds a new key, first making room if the shard is full. s.mu is held.
func (s *shard) insert(l *Limiter, key string, b bucket, now int64) {
	if len(s.m) >= l.perShard || now-s.lastSweep > l.idleAfter {
		s.sweep(l, now)
	}
	if len(s.m) >= l.perShard {
		s.evictOne()
	}
	// The caller's key may alias a reused buffer: keep a copy.
	s.m[strings.Clone(key)] = b
}

// sweep drops every key idle longer than IdleAfter. s.mu is held.
func (s *shard) sweep(l *Limiter, now int64) {
	s.lastSweep = now
	for k, b := range s.m {
		if now-b.last > l.idleAfter {
			delete(s.m, k)
		}
	}
}

// evictOne drops the least recently used of a few entries (map iteration
// order is random, so this is a random sample). s.mu is held.
func (s *shard) evictOne() {
	var victim string
	oldest := int64(math.MaxInt64)
	n := 0
	for k, b := range s.m {
		if b.last < oldest {
			victim, oldest = k, b.last
		}
		if n++; n == sampleSize {
			break
		}
	}
	delete(s.m, victim)
}
