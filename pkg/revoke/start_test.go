package revoke

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/natstest"
)

// TestStartLoadsBeforeReturning revokes a subject before Start: the
// Watcher Start returns must refuse it at once.
func TestStartLoadsBeforeReturning(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Revoke(ctx, kv, Subject, "mallory", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	g, gctx := errgroup.WithContext(ctx)
	w, err := Start(gctx, g, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Revoked("", "mallory") {
		t.Fatal("a revocation stored before Start was not loaded")
	}
	cancel()
	if err := g.Wait(); err != nil {
		t.Fatalf("watcher: %v", err)
	}
}
