package usage

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// testServer is an embedded NATS JetStream server that can be stopped and
// started again on the same port with the same store.
type testServer struct {
	t    testing.TB
	dir  string
	port int
	ns   *server.Server
}

func startServer(t testing.TB) *testServer {
	t.Helper()
	s := &testServer{t: t, dir: t.TempDir(), port: -1}
	s.start()
	s.port = s.ns.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.shutdown)
	return s
}

func (s *testServer) start() {
	s.t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: s.port, JetStream: true, StoreDir: s.dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		s.t.Fatalf("new nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		s.t.Fatal("nats server not ready")
	}
	s.ns = ns
}

func (s *testServer) shutdown() {
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.ns = nil
	}
}

func (s *testServer) restart() {
	s.t.Helper()
	s.shutdown()
	s.start()
}

func (s *testServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// connect returns a connection that reconnects forever, and a JetStream
// context on it with the usage stream in place.
func connect(t testing.TB, s *testServer, cfg Config) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connectURL(t, s.url(), cfg)
}

// connectURL is connect for a server at url.
func connectURL(t testing.TB, url string, cfg Config) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.NoCallbacksAfterClientClose())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := EnsureStream(ctx, js, StreamConfig{}); err != nil {
		t.Fatalf("ensure stream: %v", err)
	}
	return nc, js
}

func newEvent(t testing.TB, dept string, i int) *usagev1.UsageEvent {
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatalf("uuid: %v", err)
	}
	return &usagev1.UsageEvent{
		EventId:          id.String(),
		RequestId:        fmt.Sprintf("req-%d", i),
		Timestamp:        time.Now().UnixNano(),
		Dept:             dept,
		Team:             "core",
		RequestedModel:   "gpt-4o-mini",
		ServedModel:      "gpt-4o-mini-2024-07-18",
		Provider:         "openai",
		PromptTokens:     uint64(100 + i),
		CompletionTokens: 42,
		CostNanoUsd:      int64(1000 * i),
		Endpoint:         "/v1/chat/completions",
		StatusCode:       200,
	}
}

// startPublisher creates a Publisher and runs it until the test ends.
func startPublisher(t testing.TB, js jetstream.JetStream, cfg Config) *Publisher {
	t.Helper()
	p, err := NewPublisher(js, cfg, nil)
	if err != nil {
		t.Fatalf("new publisher: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return p
}

// stored is one event of the usage stream, with the message that holds it.
type stored struct {
	seq      uint64 // the message's stream sequence
	subject  string
	msgID    string
	producer string // "" for a legacy single-event message
	batchSeq uint64
	batchLen int // events in the message
	size     int // bytes of the message's data
	ev       *usagev1.UsageEvent
}

// streamBatches returns every message of the usage stream, decoded.
func streamBatches(t testing.TB, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get msg %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// streamMessages returns every event of the usage stream, in stream order
// and, within a batch, in batch order.
func streamMessages(t testing.TB, js jetstream.JetStream) []stored {
	t.Helper()
	var out []stored
	for _, m := range streamBatches(t, js) {
		var b usagev1.UsageBatch
		if err := DecodeMessage(m.Data, &b); err != nil {
			t.Fatalf("decode msg %d: %v", m.Sequence, err)
		}
		for _, ev := range b.Events {
			out = append(out, stored{seq: m.Sequence, subject: m.Subject, msgID: m.Header.Get(jetstream.MsgIDHeader),
				producer: b.ProducerId, batchSeq: b.Seq, batchLen: len(b.Events), size: len(m.Data), ev: ev})
		}
	}
	return out
}

// checkOnce checks that every event of want is in msgs exactly once, in a
// message with the right subject and Nats-Msg-Id, and that msgs holds
// nothing else.
func checkOnce(t testing.TB, msgs []stored, want []*usagev1.UsageEvent) {
	t.Helper()
	seen := make(map[string]int, len(msgs))
	for _, m := range msgs {
		seen[m.ev.GetEventId()]++
		wantID, wantSubject := m.ev.GetEventId(), Subject(m.ev.GetDept())
		if m.producer != "" {
			wantID, wantSubject = BatchMsgID(m.producer, m.batchSeq), BatchSubject(m.producer)
		}
		if m.msgID != wantID {
			t.Errorf("seq %d: Nats-Msg-Id %q, want %q", m.seq, m.msgID, wantID)
		}
		if m.subject != wantSubject {
			t.Errorf("seq %d: subject %q, want %q", m.seq, m.subject, wantSubject)
		}
	}
	for _, ev := range want {
		if n := seen[ev.GetEventId()]; n != 1 {
			t.Errorf("event %s stored %d times", ev.GetEventId(), n)
		}
	}
	if len(msgs) != len(want) || len(seen) != len(want) {
		t.Errorf("stream holds %d events, %d distinct ids; want %d", len(msgs), len(seen), len(want))
	}
}

// checkSeqs checks that the batches in msgs come from one producer with
// seqs 1, 2, 3 ... in stream order, none repeated or missing.
func checkSeqs(t testing.TB, msgs []stored, producer string) {
	t.Helper()
	var last uint64
	for _, m := range msgs {
		if m.producer != producer {
			t.Fatalf("seq %d: producer %q, want %q", m.seq, m.producer, producer)
		}
		if m.batchSeq == last {
			continue // the next event of the same batch
		}
		if m.batchSeq != last+1 {
			t.Fatalf("stream seq %d: batch seq %d after %d", m.seq, m.batchSeq, last)
		}
		last = m.batchSeq
	}
}

// checkSeqsWindowed checks what consumers rely on when a spool drain races
// the stream's return: every batch seq from 1 up is stored, and none before
// a seq WindowSize or more below it that is still missing (a Window tells
// such batches apart; checkSeqs, stricter, wants them in order).
func checkSeqsWindowed(t testing.TB, msgs []stored, producer string) {
	t.Helper()
	seen := map[uint64]bool{}
	var low uint64 = 1 // the lowest batch seq not yet stored
	for _, m := range msgs {
		if m.producer != producer {
			t.Fatalf("seq %d: producer %q, want %q", m.seq, m.producer, producer)
		}
		if m.batchSeq >= low+WindowSize {
			t.Fatalf("stream seq %d: batch seq %d with %d still missing", m.seq, m.batchSeq, low)
		}
		seen[m.batchSeq] = true
		for seen[low] {
			low++
		}
	}
	if int(low-1) != len(seen) {
		t.Fatalf("batch seqs %d to %d stored, and %d batches: a gap", 1, low-1, len(seen))
	}
}

// handOver returns a copy of ev for Enqueue, which owns what it is handed
// (once its batch is acked, an event is reset and goes back to the message
// pool): the test keeps ev to compare with what reached the stream.
func handOver(ev *usagev1.UsageEvent) *usagev1.UsageEvent { return proto.CloneOf(ev) }
