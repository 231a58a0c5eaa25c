package apikey

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

// Start ensures the key bucket, runs a Watcher on it in g until ctx ends,
// and returns the Watcher once its first load is done (within 30 s), so
// a revoked key is never accepted at start, and a Store on the bucket.
// observe is NewWatcher's; rec records the Store's changes (NewStore).
func Start(ctx context.Context, g group, js jetstream.JetStream, replicas int, observe func(time.Duration), rec recorder) (*Watcher, *Store, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := EnsureBucket(sctx, js, replicas)
	if err != nil {
		return nil, nil, err
	}
	w := NewWatcher(time.Now, observe)
	g.Go(func() error { return w.Run(ctx, kv) })
	select {
	case <-w.Ready():
		return w, NewStore(kv, time.Now, rec), nil
	case <-sctx.Done():
		return nil, nil, errors.New("api keys did not load within 30s")
	}
}
