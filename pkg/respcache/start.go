package respcache

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/config"
)

// group runs background loops; *errgroup.Group is one. Its owner stops
// them by ending the ctx they were started with.
type group interface {
	Go(f func() error)
}

// Start opens the cache bucket (Open, within 30 s) when one of models
// caches answers, and runs the cache's writers in g until ctx ends. It
// returns nil and no error when no model caches.
func Start(ctx context.Context, g group, js jetstream.JetStream, models []config.Model, replicas int) (*Cache, error) {
	ttl := BucketTTL(models)
	if ttl <= 0 {
		return nil, nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := Open(sctx, js, Options{TTL: ttl, Replicas: replicas})
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return c.Run(ctx) })
	return c, nil
}
