package budget

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// env is an embedded JetStream server with the usage stream and buckets.
type env struct {
	ns *server.Server
	nc *nats.Conn
	js jetstream.JetStream
	kv jetstream.KeyValue
	n  int // events published, for unique event ids

	// batched makes publish send batches of up to 3 events, from two
	// producers taking turns, each batch stored twice (a republish past the
	// duplicate window), instead of one legacy message per event.
	batched bool
	seqs    map[string]uint64 // producer -> last batch seq used
	// counted is the stream sequence of the last message published whose
	// events count (the first copy of a batch, not its republish).
	counted uint64
}

// startEnv starts the server with the stream's duplicate window at 2 min.
func startEnv(tb testing.TB) *env { return startEnvDup(tb, 2*time.Minute) }

// startEnvDup starts the server with the stream's duplicate window at dup.
func startEnvDup(tb testing.TB, dup time.Duration) *env {
	tb.Helper()
	ns := natstest.Start(tb)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: Stream, Subjects: []string{"tollgate.usage.>"},
		Duplicates: dup}); err != nil {
		tb.Fatal(err)
	}
	kv, err := EnsureBucket(ctx, js, 1)
	if err != nil {
		tb.Fatal(err)
	}
	return &env{ns: ns, nc: nc, js: js, kv: kv, seqs: map[string]uint64{}}
}

// restartServer stops the server and starts it again on the same port and
// store; e.nc reconnects.
func (e *env) restartServer(tb testing.TB) {
	tb.Helper()
	e.ns = natstest.Restart(tb, e.ns)
}

// newJS opens a second connection, as another process would.
func (e *env) newJS(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(e.ns.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// ev is a usage event in test shorthand.
type ev struct {
	at                                time.Time
	key, subject, team, dept, project string
	costNano                          int64
	prompt, completion                uint64
}

func (e ev) proto(id string) *usagev1.UsageEvent {
	return &usagev1.UsageEvent{EventId: id, Timestamp: e.at.UnixNano(), KeyId: e.key, Subject: e.subject,
		Team: e.team, Dept: e.dept, Project: e.project, CostNanoUsd: e.costNano,
		PromptTokens: e.prompt, CompletionTokens: e.completion}
}

// publish sends events and returns the stream sequence of the last
// message whose events count (see env.batched and env.counted).
func (e *env) publish(tb testing.TB, evs ...ev) uint64 {
	tb.Helper()
	if e.batched {
		for i := 0; i < len(evs); i += 3 {
			producer := testProducers[(i/3)%len(testProducers)]
			e.seqs[producer]++
			b := e.batch(producer, e.seqs[producer], evs[i:min(i+3, len(evs))]...)
			e.counted = e.publishBatch(tb, b, "")
			e.publishBatch(tb, b, "-republish")
		}
		return e.counted
	}
	var seq uint64
	for _, x := range evs {
		e.n++
		data, err := proto.Marshal(x.proto("ev-" + itoa(e.n)))
		if err != nil {
			tb.Fatal(err)
		}
		subj := "tollgate.usage." + x.dept
		if x.dept == "" {
			subj = "tollgate.usage._"
		}
		ack, err := e.js.Publish(context.Background(), subj, data)
		if err != nil {
			tb.Fatal(err)
		}
		seq = ack.Sequence
	}
	e.counted = max(e.counted, seq)
	return seq
}

// testProducers are the producer ids of env.batched.
var testProducers = []string{"gw1aaaaaaaaaaaaa", "gw2bbbbbbbbbbbbb"}

// batch builds batch seq of producer holding evs, with fresh event ids.
func (e *env) batch(producer string, seq uint64, evs ...ev) *usagev1.UsageBatch {
	b := &usagev1.UsageBatch{ProducerId: producer, Seq: seq, CreatedUnixMs: 1}
	for _, x := range evs {
		e.n++
		b.Events = append(b.Events, x.proto("ev-"+itoa(e.n)))
	}
	return b
}

// publishBatch stores b in the stream as a producer would (subject
// usage.BatchSubject, Nats-Msg-Id usage.BatchMsgID) and returns its stream
// sequence. A non-empty idSuffix changes the Nats-Msg-Id, so the stream
// stores it even within the duplicate window: a republish after the window
// as the consumers see it.
func (e *env) publishBatch(tb testing.TB, b *usagev1.UsageBatch, idSuffix string) uint64 {
	tb.Helper()
	data, err := proto.Marshal(b)
	if err != nil {
		tb.Fatal(err)
	}
	ack, err := e.js.Publish(context.Background(), usage.BatchSubject(b.ProducerId), data,
		jetstream.WithMsgID(usage.BatchMsgID(b.ProducerId, b.Seq)+idSuffix))
	if err != nil {
		tb.Fatal(err)
	}
	if ack.Duplicate {
		tb.Fatalf("batch %s:%d dropped by the stream as a duplicate", b.ProducerId, b.Seq)
	}
	return ack.Sequence
}

// publishBatches stores batches seqs of producer, each holding
// knownEvents[0], and returns the last one's stream sequence.
func (e *env) publishBatches(tb testing.TB, producer string, seqs ...uint64) (last uint64) {
	tb.Helper()
	for _, seq := range seqs {
		last = e.publishBatch(tb, e.batch(producer, seq, knownEvents[0]), "")
	}
	return last
}

// recreateStream deletes the usage stream, and with it its consumers, and
// creates it again, empty: its sequences start at 1 again.
func (e *env) recreateStream(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	if err := e.js.DeleteStream(ctx, Stream); err != nil {
		tb.Fatal(err)
	}
	natstest.Recreate(tb, func() error {
		_, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: Stream, Subjects: []string{"tollgate.usage.>"}})
		return err
	})
}

// deptRequests is the all-time requests of dept's spend total.
func (e *env) deptRequests(tb testing.TB, dept string) uint64 {
	tb.Helper()
	return e.total(tb, TotalID{Scope: ScopeDept, Value: dept, Period: PeriodTotal}).GetRequests()
}

// streamMsgs is the number of messages the stream holds.
func (e *env) streamMsgs(tb testing.TB) uint64 {
	tb.Helper()
	s, err := e.js.Stream(context.Background(), Stream)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Msgs
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// run starts c in the background; the returned func cancels it and returns
// Run's error.
func run(tb testing.TB, c *Consumer) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once bool
	var res error
	stop = func() error {
		if !once {
			once = true
			cancel()
			res = <-done
		}
		return res
	}
	tb.Cleanup(func() { _ = stop() })
	return stop
}

func newConsumer(tb testing.TB, js jetstream.JetStream, o ConsumerOptions) *Consumer {
	tb.Helper()
	if o.Logger == nil {
		o.Logger = discard()
	}
	c, err := NewConsumer(js, o)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// total reads one total from the bucket (nil when absent).
func (e *env) total(tb testing.TB, id TotalID) *usagev1.SpendTotal {
	tb.Helper()
	ent, err := e.kv.Get(context.Background(), id.Key())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	var st usagev1.SpendTotal
	if err := proto.Unmarshal(ent.Value(), &st); err != nil {
		tb.Fatal(err)
	}
	return &st
}

// waitApplied waits until the global total includes stream sequence seq.
func (e *env) waitApplied(tb testing.TB, seq uint64) {
	tb.Helper()
	testkit.Wait(tb, 10*time.Second, "the condition", func() bool {
		st := e.total(tb, TotalID{Scope: ScopeGlobal, Period: PeriodTotal})
		return st != nil && st.AsOfSeq >= seq
	})
}

// waitAcked waits until durable's ack floor is the stream's last message:
// everything published so far was folded and acknowledged. (A batch that
// failed and was nacked leaves no ack pending, but holds the floor back.)
func (e *env) waitAcked(tb testing.TB, durable string) {
	tb.Helper()
	ctx := context.Background()
	testkit.Wait(tb, 10*time.Second, "the condition", func() bool {
		s, err := e.js.Stream(ctx, Stream)
		if err != nil {
			return false
		}
		si, err := s.Info(ctx)
		if err != nil {
			return false
		}
		c, err := e.js.Consumer(ctx, Stream, durable)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Stream == si.State.LastSeq
	})
}

// waitConsumed waits until durable has acknowledged everything.
func (e *env) waitConsumed(tb testing.TB, durable string) {
	tb.Helper()
	testkit.Wait(tb, 10*time.Second, "the condition", func() bool {
		c, err := e.js.Consumer(context.Background(), Stream, durable)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// utc builds a UTC time.
func utc(y int, mo time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}
