package gateway

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/natsconn"
	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// TestNATSOutageUnderLoad runs steady load through a gateway publishing to
// a real nats-server process, stops the server for a while, starts it
// again, and kills and restarts the budget consumer several times. Every
// request must be in the stream exactly once (spooled, drained, deduped),
// and the budget totals must equal the sum of the events.
func TestNATSOutageUnderLoad(t *testing.T) {
	srv := natstest.NewBinary(t)
	log := slog.New(slog.DiscardHandler)
	nc, err := natsconn.Connect(config.NATS{URL: srv.URL()}, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ucfg := usage.Config{SpoolDir: t.TempDir(), AckTimeout: time.Second}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	t.Cleanup(func() { cancel(); bg.Wait() })
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	kv, err := budget.EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := usage.NewPublisher(js, ucfg, log)
	if err != nil {
		t.Fatal(err)
	}
	bg.Add(1)
	go func() { defer bg.Done(); _ = pub.Run(ctx) }()

	// The budget consumer, killed and restarted during the run.
	var consumerMu sync.Mutex
	var stopConsumer context.CancelFunc
	startConsumer := func() {
		c, err := budget.NewConsumer(js, budget.ConsumerOptions{Logger: log})
		if err != nil {
			t.Error(err)
			return
		}
		cctx, ccancel := context.WithCancel(ctx)
		consumerMu.Lock()
		stopConsumer = ccancel
		consumerMu.Unlock()
		bg.Add(1)
		go func() {
			defer bg.Done()
			for cctx.Err() == nil {
				if err := c.Run(cctx); err == nil || cctx.Err() != nil {
					return
				}
				time.Sleep(200 * time.Millisecond) // NATS is down: try again
			}
		}()
	}
	startConsumer()

	r := newRig(t, nil)
	gw, err := New(Options{Config: r.cfg, Verifier: r.gw.state.Load().verifier, Logger: log, Accounting: Accounting{Publisher: pub}})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() { _ = gw.Shutdown(context.Background()) })
	r.gw, r.url = gw, "http://"+ln.Addr().String()
	tok := r.token(nil)

	var mu sync.Mutex
	served := map[string]bool{}
	stop := make(chan struct{})
	var load sync.WaitGroup
	for w := 0; w < 4; w++ {
		load.Add(1)
		go func() {
			defer load.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp := r.post("/v1/chat/completions", tok, chatBody)
				readBody(t, resp)
				if resp.StatusCode != 200 {
					t.Errorf("status %d during the outage", resp.StatusCode)
					continue
				}
				time.Sleep(2 * time.Millisecond) // steady load, not a flood
				mu.Lock()
				served[resp.Header.Get("X-Request-Id")] = true
				mu.Unlock()
			}
		}()
	}
	step := func(d time.Duration, what string, f func()) {
		time.Sleep(d)
		t.Log(what)
		f()
	}
	restartConsumer := func() {
		consumerMu.Lock()
		stopConsumer()
		consumerMu.Unlock()
		startConsumer()
	}
	step(700*time.Millisecond, "kill the budget consumer and restart it", restartConsumer)
	step(500*time.Millisecond, "stop nats-server", srv.Stop)
	step(1500*time.Millisecond, "start nats-server again", srv.Start)
	step(500*time.Millisecond, "kill the budget consumer and restart it", restartConsumer)
	step(1000*time.Millisecond, "stop the load", func() { close(stop) })
	load.Wait()

	st := pub.Stats()
	t.Logf("served %d; publisher: %+v", len(served), st)
	if st.Spooled == 0 {
		t.Error("nothing was spooled: the outage did not bite")
	}
	// Every event has gone out live or from the spool. Queue, ring and
	// spool can all be empty while a batch waits in memory behind one the
	// window held back, so the counts decide, not only the queues.
	testkit.Wait(t, 60*time.Second, "the spool to drain", func() bool {
		s := pub.Stats()
		return s.QueueLen == 0 && s.Pending == 0 && s.SpoolBytes == 0 && s.Spooled == s.Drained &&
			s.Published+s.Drained == s.Queued-s.Dropped
	})

	// Every served request is in the stream exactly once.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	oc, err := js.OrderedConsumer(sctx, usage.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := oc.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	info, err := js.Stream(sctx, usage.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	si, err := info.Info(sctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var cost int64
	var events int
	var b usagev1.UsageBatch
	for range si.State.Msgs {
		msg, err := it.Next()
		if err != nil {
			t.Fatalf("read %d of %d events: %v", len(seen), len(served), err)
		}
		if err := usage.DecodeMessage(msg.Data(), &b); err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			seen[ev.RequestId]++
			cost += ev.CostNanoUsd
			events++
		}
	}
	if events != len(served) {
		t.Errorf("stream holds %d events in %d messages for %d served requests", events, si.State.Msgs, len(served))
	}
	for id := range served {
		if seen[id] != 1 {
			t.Errorf("request %s is in the stream %d times", id, seen[id])
		}
	}

	// The budget totals include every event exactly once.
	id := budget.TotalID{Scope: budget.ScopeGlobal, Period: budget.PeriodTotal}
	testkit.Wait(t, 30*time.Second, "the budget consumer to catch up", func() bool {
		e, err := kv.Get(ctx, id.Key())
		if err != nil {
			return false
		}
		var tot usagev1.SpendTotal
		return proto.Unmarshal(e.Value(), &tot) == nil && tot.Requests == uint64(len(served))
	})
	e, _ := kv.Get(ctx, id.Key())
	var tot usagev1.SpendTotal
	_ = proto.Unmarshal(e.Value(), &tot)
	if tot.CostNanoUsd != cost {
		t.Errorf("global total cost %d, events sum to %d", tot.CostNanoUsd, cost)
	}
}
