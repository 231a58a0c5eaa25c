package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
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
// stored), no-store skips both. It reports whether the answer went out.
func (g *Gateway) lookupCache(c *fiber.Ctx, m *config.Model, p *auth.Principal, rec *record, includeUsage bool, body []byte) (served bool) {
	if g.cache == nil || m == nil || m.Cache.TTL <= 0 {
		return false
	}
	cc := c.Request().Header.Peek(fiber.HeaderCacheControl)
	if bytes.Contains(cc, []byte("no-store")) {
		c.Set("x-tollgate-cache", "bypass")
		return false
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
		return false
	}
	e, err := g.cache.Get(c.Context(), k)
	if err != nil {
		if !errors.Is(err, respcache.ErrMiss) {
			g.log.Warn("response cache read failed", "err", err)
		}
		c.Set("x-tollgate-cache", "miss")
		return false
	}
	if e.Stream != rec.stream {
		c.Set("x-tollgate-cache", "miss")
		return false
	}
	rec.cache.hit, rec.cache.put = true, false
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
		return true
	}
	c.Response().Header.SetContentType("text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	next, stop := iter.Pull(e.Events())
	rec.held = true
	c.Context().SetBodyStream(&replay{next: next, stop: stop, done: func() { g.finish(rec) }}, -1)
	return true
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
