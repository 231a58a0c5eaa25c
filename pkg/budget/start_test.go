package budget

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"
)

func TestStartTracker(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	limits, err := ParseLimits([]config.BudgetLimit{{Scope: "dept", Value: "eng", AmountUSD: "10", Period: "month"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	tr, err := StartTracker(gctx, g, js, 1, limits, &LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Ready():
	default:
		t.Fatal("StartTracker returned before the totals were loaded")
	}
	if _, err := js.KeyValue(ctx, Bucket); err != nil {
		t.Fatalf("spend bucket: %v", err)
	}
	if _, err := js.KeyValue(ctx, LeaseBucket); err != nil {
		t.Fatalf("leases bucket: %v", err)
	}
	if r := tr.Report(); len(r) != 1 {
		t.Errorf("report %+v, want the one limit", r)
	}
	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("tracker: %v", err)
	}
}
