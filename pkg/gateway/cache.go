package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"math"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/respcache"
)

// responseCache is the exact-match response cache (pkg/respcache).
type responseCache interface {
	Get(ctx context.Context, k respcache.Key) (*respcache.Entry, error)
	Put(k respcache.Key, ttl time.Duration, e *respcache.Entry) bool
	// TTL is the bucket's: no entry outlives it.
	TTL() time.Duration
}

// cacheState is a request's relation to the response cache.
type cacheState struct {
	key  respcache.Key
	ttl  time.Duration
	full bool // bill hits at the original answer's price
	put  bool // store the answer when it completes
	hit  bool
}

// lookupCache serves a request from the cache when its model caches
// answers. Cache-Control: no-cache skips the read (the answer is still
// stored), no-store skips both. A hit is admitted before it is served
// (admitHit), and a refused one answers the refusal. It reports whether
// the request was answered, and the error of writing a refusal.
func (g *Gateway) lookupCache(c *fiber.Ctx, st *state, m *config.Model, p *auth.Principal, rec *record, includeUsage bool, body []byte) (answered bool, err error) {
	if g.cache == nil || m == nil || m.Cache.TTL <= 0 {
		return false, nil
	}
	cc := c.Request().Header.Peek(fiber.HeaderCacheControl)
	if bytes.Contains(cc, []byte("no-store")) {
		c.Set("x-tollgate-cache", "bypass")
		return false, nil
	}
	answer := respcache.NonStream
	if rec.stream {
		answer = respcache.Stream
		if includeUsage {
			answer = respcache.StreamWithUsage
		}
	}
	// The endpoint's parse checked the body: no second validation.
	k := respcache.KeyOf(strings.TrimPrefix(rec.endpointPath(), "/v1"), body, answer, respcache.Scope{Dept: p.Dept, Team: p.Team, Shared: m.Cache.ShareAcrossScopes})
	rec.cache = &cacheState{key: k, ttl: m.Cache.TTL, full: m.Cache.Bill == "full", put: true}
	if bytes.Contains(cc, []byte("no-cache")) {
		c.Set("x-tollgate-cache", "bypass")
		return false, nil
	}
	e, err := g.cache.Get(c.Context(), k)
	if err != nil {
		if !errors.Is(err, respcache.ErrMiss) {
			g.log.Warn("response cache read failed", "err", err)
		}
		c.Set("x-tollgate-cache", "miss")
		return false, nil
	}
	if e.Stream != rec.stream {
		c.Set("x-tollgate-cache", "miss")
		return false, nil
	}
	rec.cache.put = false
	if aerr := g.admitHit(c, st, p, rec, e); aerr != nil {
		return true, g.fail(c, rec, aerr)
	}
	rec.cache.hit = true
	rec.usage = tokenUsage{Prompt: e.Usage.Prompt, Completion: e.Usage.Completion, Cached: e.Usage.Cached, Reasoning: e.Usage.Reasoning, Reported: true}
	rec.status, rec.started = fiber.StatusOK, true
	rec.cachedModel, rec.cachedProvider = e.Model, e.Provider
	c.Set("x-tollgate-cache", "hit")
	c.Set("x-tollgate-model", e.Model)
	c.Set("x-tollgate-provider", e.Provider)
	if !e.Stream {
		c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
		c.Response().SetBody(e.Body)
		g.finish(rec)
		return true, nil
	}
	c.Response().Header.SetContentType("text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	next, stop := iter.Pull(e.Events())
	rec.held = true
	c.Context().SetBodyStream(&replay{next: next, stop: stop, done: func() { g.finish(rec) }}, -1)
	return true, nil
}

// admitHit admits a cache hit as any request is admitted (issue #41: the
// cache was read before admission, and hits went past rate limits and
// budgets). Every hit is a request: it counts against rpm limits and is
// refused by a full usage backlog. A model that bills hits in full
// (cache.bill: full) also charges the original answer's tokens to tpm
// limits and reserves the hit's exact cost (the original usage at the
// current price) against the budgets, refused with 429 when they have no
// room for it. A hit billed zero uses no provider tokens and costs
// nothing: tpm limits and budgets do not count it.
func (g *Gateway) admitHit(c *fiber.Ctx, st *state, p *auth.Principal, rec *record, e *respcache.Entry) *apiError {
	if !rec.cache.full {
		return g.admitCost(c, st, p, &rec.adm, 0, nil)
	}
	var cost int64
	if rec.prices != nil {
		if pr, ok := rec.prices.Lookup(e.Model); ok {
			cost = pr.Cost(pricing.Usage{PromptTokens: e.Usage.Prompt, CompletionTokens: e.Usage.Completion,
				CachedTokens: e.Usage.Cached, ReasoningTokens: e.Usage.Reasoning})
		}
	}
	tokens := int64(min(e.Usage.Prompt+e.Usage.Completion, math.MaxInt64))
	return g.admitCost(c, st, p, &rec.adm, tokens, func(*admission, int64) int64 { return cost })
}

// replay writes a cached stream event by event: each Read hands fasthttp
// one event, which it writes and flushes as one chunk.
type replay struct {
	next    func() ([]byte, bool)
	stop    func()
	pending []byte
	done    func()
	closed  bool
}

func (r *replay) Read(p []byte) (int, error) {
	if len(r.pending) == 0 {
		ev, ok := r.next()
		if !ok {
			return 0, io.EOF
		}
		r.pending = ev
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// CloseWithError ends the replay (fasthttp calls it when the body is
// written or the client is gone).
func (r *replay) CloseWithError(error) error {
	if !r.closed {
		r.closed = true
		r.stop()
		r.done()
	}
	return nil
}

// storeUnary caches a successful non-stream answer.
func (g *Gateway) storeUnary(rec *record, body []byte) {
	if rec.cache == nil || !rec.cache.put || g.cache == nil {
		return
	}
	u := rec.usage
	e := &respcache.Entry{Body: body, Usage: respcache.Usage{Prompt: u.Prompt, Completion: u.Completion, Cached: u.Cached, Reasoning: u.Reasoning}}
	if rec.route != nil {
		e.Model, e.Provider = rec.route.upstreamModel, rec.route.up.name
	}
	g.cache.Put(rec.cache.key, rec.cache.ttl, e)
}
