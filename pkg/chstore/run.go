package chstore

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// RunLoaders runs on store what the analytics service runs, as does
// gateway -embed: the usage loader of o (NewLoader), the audit loader
// (NewAuditLoader, logging to o.Logger) and, unless limits is nil, the
// writer of the budget limits handed to limits. They stop when ctx ends or
// one of them fails; RunLoaders returns the first error.
func RunLoaders(ctx context.Context, store *Store, js jetstream.JetStream, o LoaderOptions, limits *LimitWriter) error {
	loader, err := NewLoader(store, js, o)
	if err != nil {
		return err
	}
	audit := NewAuditLoader(store, js, o.Replicas, 0, loader.log)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return loader.Run(ctx) })
	g.Go(func() error { return audit.Run(ctx) })
	if limits != nil {
		g.Go(func() error { return limits.Run(ctx, store) })
	}
	return g.Wait()
}
