package respcache

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natstest"
)

func TestStart(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	cached := config.Model{Name: "m"}
	cached.Cache.TTL = time.Minute
	tests := []struct {
		name      string
		models    []config.Model
		wantCache bool
	}{
		{"no model caches", []config.Model{{Name: "m"}}, false},
		{"a model caches", []config.Model{{Name: "n"}, cached}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g, gctx := errgroup.WithContext(ctx)
			c, err := Start(gctx, g, js, tt.models, 1)
			if err != nil {
				t.Fatal(err)
			}
			if (c != nil) != tt.wantCache {
				t.Fatalf("cache %v, want one: %v", c, tt.wantCache)
			}
			if tt.wantCache {
				if _, err := js.KeyValue(ctx, DefaultBucket); err != nil {
					t.Fatalf("cache bucket: %v", err)
				}
			}
			cancel()
			if err := g.Wait(); err != nil {
				t.Fatalf("cache writers: %v", err)
			}
		})
	}
}
