package revoke

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// group runs background loops; *errgroup.Group is one. Its owner stops
// them by ending the ctx they were started with.
type group interface {
	Go(f func() error)
}

// Start ensures the revocation bucket, runs a Watcher on it in g until ctx
// ends, and returns the Watcher once its first load is done (within 30 s),
// so a revoked token is never accepted at start. observe is NewWatcher's.
func Start(ctx context.Context, g group, js jetstream.JetStream, replicas int, observe func(time.Duration)) (*Watcher, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := EnsureBucket(sctx, js, replicas)
	if err != nil {
		return nil, err
	}
	w := NewWatcher(time.Now, observe)
	g.Go(func() error { return w.Run(ctx, kv) })
	select {
	case <-w.Ready():
		return w, nil
	case <-sctx.Done():
		return nil, errors.New("revocations did not load within 30s")
	}
}
