//go:build chcluster

package chstore

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/chtest"
)

func TestClusterMigrate(t *testing.T) {
	c := chtest.NewCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{Addr: c.Addrs(), Database: "tollgate", Cluster: chtest.ClusterName})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
}
