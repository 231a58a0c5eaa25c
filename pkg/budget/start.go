package budget

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

// StartTracker ensures the spend bucket, runs a Tracker of limits on it in
// g until ctx ends, and returns the Tracker once it has loaded every total
// (within 30 s), so no request is admitted against totals not yet read.
// With leases (nil: off) it also ensures the leases bucket and runs the
// Tracker's leases on it (RunLeases; the slices are returned when ctx
// ends), loaded before it returns too.
func StartTracker(ctx context.Context, g group, js jetstream.JetStream, replicas int, limits []Limit, leases *LeaseOptions) (*Tracker, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := EnsureBucket(sctx, js, replicas)
	if err != nil {
		return nil, err
	}
	t := NewTracker(TrackerOptions{Limits: limits, Leases: leases})
	g.Go(func() error { return t.Run(ctx, kv) })
	if leases != nil {
		lkv, err := EnsureLeaseBucket(sctx, js, replicas, leases.TTL)
		if err != nil {
			return nil, err
		}
		g.Go(func() error { return t.RunLeases(ctx, lkv) })
	}
	for _, ready := range []<-chan struct{}{t.Ready(), t.LeasesReady()} {
		select {
		case <-ready:
		case <-sctx.Done():
			return nil, errors.New("budget totals did not load within 30s")
		}
	}
	return t, nil
}
