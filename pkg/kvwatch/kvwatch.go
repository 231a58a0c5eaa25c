// Package kvwatch keeps an in-memory view of a NATS KV bucket from a watch
// of every key: the one loop behind the gateway's revocation list
// (pkg/revoke) and API key table (pkg/apikey).
package kvwatch

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Run watches every key of kv until ctx ends (it returns nil then, or when
// the watch closes). apply records one update, a put or a delete, in the
// caller's view and reports whether the view changed; loaded is false
// while the bucket's initial values are being delivered. publish is called
// once the initial values are in, when ready is also closed, and after
// every change from then on. name names the bucket in errors.
func Run(ctx context.Context, kv jetstream.KeyValue, name string, ready chan<- struct{},
	apply func(e jetstream.KeyValueEntry, loaded bool) bool, publish func()) error {
	// The client stops a watch opened with ctx once ctx ends: it
	// unsubscribes and deletes the watch's consumer. Stopping it here as
	// well raced with that and sent a second delete of the same consumer,
	// which a clustered nats-server leaves unanswered: the caller then
	// waited the client's request timeout (5 s) before returning.
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", name, err)
	}
	loaded := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil { // the initial values are delivered
				publish()
				if !loaded {
					loaded = true
					close(ready)
				}
				continue
			}
			if apply(e, loaded) && loaded {
				publish()
			}
		}
	}
}
