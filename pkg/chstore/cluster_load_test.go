//go:build chcluster

package chstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/chtest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// The replicated cluster test (make test-cluster; RELIABILITY.md,
// "Replicated ClickHouse"): ZooKeeper and two clickhouse-server replicas of
// one shard, the schema migrated ON CLUSTER, usage batches from three
// producers loaded by the real Loader from an embedded JetStream, and each
// replica killed with SIGKILL in turn in the middle of the load. Every
// event must then be stored exactly once, on both replicas, and every
// rollup must hold the events' sums (checkExact).

const (
	clusterProducers = 3
	clusterPerBatch  = 50
	clusterBatches   = 160 // per producer: 24,000 events in all
)

func TestClusterReplicaKilled(t *testing.T) {
	c := chtest.NewCluster(t, 1, 2)
	js := newJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	o := Options{Addr: c.Addrs(), Database: "tollgate", Cluster: chtest.ClusterName}
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	began := time.Now()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("migrated on the cluster in %v", time.Since(began).Round(time.Millisecond))

	lo := testOptions(1000)
	l, err := NewLoader(s, js, lo)
	if err != nil {
		t.Fatal(err)
	}
	r := start(l.Run)

	total := clusterProducers * clusterBatches * clusterPerBatch
	var pub sync.WaitGroup
	pubErr := make(chan error, clusterProducers)
	var lastMu sync.Mutex
	var last uint64
	loadBegan := time.Now()
	for p := range clusterProducers {
		pub.Go(func() {
			seq, err := publishProducer(js, p)
			if err != nil {
				pubErr <- err
				return
			}
			lastMu.Lock()
			last = max(last, seq)
			lastMu.Unlock()
		})
	}
	// Kill each replica in turn once a quarter, then a half, of the events
	// are stored (the loader trails the publishers, and catches up after
	// a kill), and bring it back while the load goes on.
	for i, srv := range c.Servers {
		waitRows(t, s, uint64(total*(i+1)/4), r.done)
		inserting := waitInsert(t, srv, r.done)
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		t.Logf("replica r%d killed at %d stored rows, with an insert of the loader running: %v", i+1, countRows(s), inserting)
		time.Sleep(500 * time.Millisecond) // the loader writes to the other replica meanwhile
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Logf("replica r%d back after %v", i+1, time.Since(killed).Round(time.Millisecond))
	}
	pub.Wait()
	select {
	case err := <-pubErr:
		t.Fatal(err)
	default:
	}
	waitWatermark(t, s, last, r.done)
	loaded := time.Since(loadBegan)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events loaded in %v with a replica kill each; failed store attempts %v, rows found stored on a retry %v",
		total, loaded.Round(time.Millisecond), metricValue(l.m.errors.WithLabelValues("store")), metricValue(l.m.skippedStored))

	want := expect(0, total)
	for i, srv := range c.Servers {
		rs, err := Open(ctx, Options{Addr: srv.Addr(), Database: "tollgate"})
		if err != nil {
			t.Fatal(err)
		}
		syncReplicas(t, rs, want)
		t.Run(fmt.Sprintf("replica r%d", i+1), func(t *testing.T) { checkExact(t, rs, want) })
		var dup uint64
		_ = rs.conn.QueryRow(ctx, "SELECT sum(value) FROM system.events WHERE event = 'DuplicatedInsertedBlocks'").Scan(&dup)
		t.Logf("replica r%d: blocks dropped by deduplication since its start: %d", i+1, dup)
		rs.Close()
	}
}

// publishProducer publishes producer p's batches the way a gateway does
// (its batch subject and Nats-Msg-Id), a little apart so that the load
// lasts a few seconds, and returns the last stream sequence.
func publishProducer(js jetstream.JetStream, p int) (uint64, error) {
	producer := fmt.Sprintf("gw-%d", p)
	var last uint64
	for b := range clusterBatches {
		from := (b*clusterProducers + p) * clusterPerBatch
		data, err := proto.Marshal(testBatch(producer, uint64(b+1), from, from+clusterPerBatch))
		if err != nil {
			return 0, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ack, err := js.Publish(ctx, usage.BatchSubject(producer), data, jetstream.WithMsgID(usage.BatchMsgID(producer, uint64(b+1))))
		cancel()
		if err != nil {
			return 0, fmt.Errorf("publish %s:%d: %w", producer, b+1, err)
		}
		last = max(last, ack.Sequence)
		time.Sleep(25 * time.Millisecond)
	}
	return last, nil
}

// waitInsert waits, for up to 10 s, until the replica srv runs an insert
// of the loader, so that the kill lands in the middle of one; it reports
// whether it saw one.
func waitInsert(t *testing.T, srv *chtest.Server, done <-chan error) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := Open(ctx, Options{Addr: srv.Addr(), Database: "tollgate"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for ctx.Err() == nil {
		var n uint64
		if err := rs.conn.QueryRow(ctx, chsql.RunningInserts.SQL, rs.insertPrefix()).Scan(&n); err == nil && n > 0 {
			return true
		}
		select {
		case err := <-done:
			t.Fatalf("loader stopped early: %v", err)
		default:
		}
	}
	return false
}

// countRows returns the rows of usage_events on the replica s reaches, 0
// when it cannot tell.
func countRows(s *Store) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n uint64
	_ = s.conn.QueryRow(ctx, "SELECT count() FROM usage_events").Scan(&n)
	return n
}

// waitRows waits until the replica s reaches holds at least n rows.
func waitRows(t *testing.T, s *Store, n uint64, done <-chan error) {
	t.Helper()
	waitFor(t, done, func() bool { return countRows(s) >= n })
}

// syncReplicas waits until the replica s reaches holds the events of e
// (checkExact's totals), for up to a minute: a restarted replica fetches
// what it missed after it answers, and SYSTEM SYNC REPLICA waits only for
// what its queue already holds. A replica holding anything else, a row
// twice for instance, never gets there; checkExact then shows how.
func syncReplicas(t *testing.T, s *Store, e expected) {
	t.Helper()
	want := exactTotals(e)
	deadline := time.Now().Add(time.Minute)
	for readTotals(t, s) != want && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterShards migrates a cluster of two shards of one replica each
// and checks that the Distributed tables read both shards: events written
// on each shard (as a loader reaching that shard would) add up in
// usage_events_all and in the rollups' _all tables.
func TestClusterShards(t *testing.T) {
	c := chtest.NewCluster(t, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{Addr: c.Addrs(), Database: "tollgate", Cluster: chtest.ClusterName})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const per = 500
	for i, srv := range c.Servers {
		rs, err := Open(ctx, Options{Addr: srv.Addr(), Database: "tollgate", Cluster: chtest.ClusterName})
		if err != nil {
			t.Fatal(err)
		}
		var events []*usagev1.UsageEvent
		var src []Source
		for j := i * per; j < (i+1)*per; j++ {
			events = append(events, testEvent(j))
			src = append(src, Source{StreamSeq: uint64(j + 1)})
		}
		if err := InsertSourced(ctx, rs.conn, events, src, time.Now()); err != nil {
			t.Fatal(err)
		}
		var local uint64
		if err := rs.conn.QueryRow(ctx, "SELECT count() FROM usage_events").Scan(&local); err != nil || local != per {
			t.Fatalf("shard %d holds %d rows (%v), want %d", i+1, local, err, per)
		}
		rs.Close()
	}
	want := expect(0, 2*per)
	var rows, hourReqs, dayReqs uint64
	var cost, dayCost int64
	for _, q := range []struct {
		sql  string
		dest []any
	}{
		{"SELECT count(), sum(cost_nano_usd) FROM usage_events_all", []any{&rows, &cost}},
		{"SELECT sum(requests) FROM usage_hourly_all", []any{&hourReqs}},
		{"SELECT sum(requests), sum(cost_nano_usd) FROM usage_daily_all", []any{&dayReqs, &dayCost}},
	} {
		if err := s.conn.QueryRow(ctx, q.sql).Scan(q.dest...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if rows != uint64(want.rows) || cost != want.cost || hourReqs != uint64(want.rows) || dayReqs != uint64(want.rows) || dayCost != want.cost {
		t.Fatalf("all shards: %d rows cost %d, hourly %d, daily %d cost %d; want %d rows cost %d",
			rows, cost, hourReqs, dayReqs, dayCost, want.rows, want.cost)
	}
}

// TestClusterLoaderAndReplicaKilled kills a loader right after an insert
// (before its watermark) together with the replica it inserted into, r1,
// while r2 fetches nothing (SYSTEM STOP FETCHES), so the rows are only on
// the dead replica. The next loader, writing to r2, must not store that
// batch again: its look-up asks every replica and waits for r1 to be back.
func TestClusterLoaderAndReplicaKilled(t *testing.T) {
	c := chtest.NewCluster(t, 1, 2)
	js := newJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := Options{Addr: c.Addrs(), Database: "tollgate", Cluster: chtest.ClusterName}
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	onR2, onR1 := o, o
	onR2.Addr, onR1.Addr = c.Servers[1].Addr(), c.Servers[0].Addr()
	r2s, err := Open(ctx, onR2)
	if err != nil {
		t.Fatal(err)
	}
	defer r2s.Close()
	if err := r2s.conn.Exec(ctx, "SYSTEM STOP FETCHES"); err != nil {
		t.Fatal(err)
	}
	const events, batch = 3000, 500
	last := publish(t, js, 0, events)

	s1, err := Open(ctx, onR1)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	l1, err := NewLoader(s1, js, testOptions(batch))
	if err != nil {
		t.Fatal(err)
	}
	crash := crashOn(2)
	l1.afterInsert = func() error {
		if err := crash(); err != nil {
			if kerr := c.Servers[0].Kill(); kerr != nil {
				t.Error(kerr)
			}
			return err
		}
		return nil
	}
	r1 := start(l1.Run)
	select {
	case err := <-r1.done:
		if !errors.Is(err, errCrash) {
			t.Fatalf("first loader: %v, want the crash", err)
		}
	case <-ctx.Done():
		t.Fatal("first loader did not crash")
	}

	s2, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	l2, err := NewLoader(s2, js, testOptions(batch))
	if err != nil {
		t.Fatal(err)
	}
	r2 := start(l2.Run)
	time.Sleep(time.Second) // the second loader looks up stored rows while r1 is down
	if err := c.Servers[0].Start(); err != nil {
		t.Fatal(err)
	}
	waitWatermark(t, s2, last, r2.done)
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}
	t.Logf("second loader: failed store attempts %v, events found stored by its look-up %v",
		metricValue(l2.m.errors.WithLabelValues("store")), metricValue(l2.m.skippedStored))
	if err := r2s.conn.Exec(ctx, "SYSTEM START FETCHES"); err != nil {
		t.Fatal(err)
	}
	want := expect(0, events)
	for i, srv := range c.Servers {
		rs, err := Open(ctx, Options{Addr: srv.Addr(), Database: "tollgate"})
		if err != nil {
			t.Fatal(err)
		}
		syncReplicas(t, rs, want)
		t.Run(fmt.Sprintf("replica r%d", i+1), func(t *testing.T) { checkExact(t, rs, want) })
		rs.Close()
	}
}
