package usage

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"

	"github.com/tollgate/tollgate/pkg/config"
)

// TestBatchIsOneMessage queues events before Run starts: Run takes them as
// one batch, one stream message holding every event in order, with seq 1,
// its producer's subject and Nats-Msg-Id, and one OnAck per event with the
// message's stream sequence. By default the message is the batch
// compressed (the mark, then one s2 block), about a quarter of its plain
// encoding; with Compression none it is the plain encoding.
func TestBatchIsOneMessage(t *testing.T) {
	for _, tc := range []struct {
		compression string
		compressed  bool
	}{{"", true}, {CompressionS2, true}, {CompressionNone, false}} {
		t.Run("compression="+tc.compression, func(t *testing.T) {
			testBatchIsOneMessage(t, tc.compression, tc.compressed)
		})
	}
}

func testBatchIsOneMessage(t *testing.T, compression string, compressed bool) {
	const n = 40
	srv := startServer(t)
	var got acks
	cfg := Config{SpoolDir: t.TempDir(), OnAck: got.onAck, BatchSize: 64, Compression: compression}
	_, js := connect(t, srv, cfg)
	p, err := NewPublisher(js, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !ValidProducerID(p.ProducerID()) {
		t.Fatalf("producer id %q", p.ProducerID())
	}
	var want []*usagev1.UsageEvent
	for i := range n {
		ev := newEvent(t, []string{"finance", "ops"}[i%2], i)
		want = append(want, ev)
		if err := p.Enqueue(handOver(ev)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testkit.Wait(t, 10*time.Second, "published", func() bool { return p.Stats().Published == n })
	closePublisher(t, p)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	raw := streamBatches(t, js)
	if len(raw) != 1 {
		t.Fatalf("%d stream messages, want 1", len(raw))
	}
	m := raw[0]
	data := m.Data
	if Compressed(data) != compressed {
		t.Fatalf("compressed %v, want %v", Compressed(data), compressed)
	}
	if compressed {
		var err error
		if data, err = s2.Decode(nil, data[1:]); err != nil {
			t.Fatal(err)
		}
		if 4*len(m.Data) > 2*len(data) {
			t.Errorf("compressed to %d of %d bytes, want at most half", len(m.Data), len(data))
		}
	}
	var b usagev1.UsageBatch
	if err := proto.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	if b.ProducerId != p.ProducerID() || b.Seq != 1 || b.Resumed || b.CreatedUnixMs == 0 || len(b.Events) != n {
		t.Fatalf("batch producer %q seq %d resumed %v created %d with %d events", b.ProducerId, b.Seq, b.Resumed, b.CreatedUnixMs, len(b.Events))
	}
	for i, ev := range b.Events {
		if !proto.Equal(ev, want[i]) {
			t.Fatalf("event %d: %v, want %v", i, ev, want[i])
		}
	}
	if m.Subject != BatchSubject(p.ProducerID()) || m.Header.Get(jetstream.MsgIDHeader) != BatchMsgID(p.ProducerID(), 1) {
		t.Errorf("subject %q, Nats-Msg-Id %q", m.Subject, m.Header.Get(jetstream.MsgIDHeader))
	}
	got.check(t, streamMessages(t, js))
	if st := p.Stats(); st.BatchesPublished != 1 || st.LastSeq != 1 {
		t.Errorf("stats %+v", st)
	}
}

// publishSome enqueues n events one at a time, each published before the
// next, so each is a batch of its own, and returns them.
func publishSome(t *testing.T, p *Publisher, n int) []*usagev1.UsageEvent {
	t.Helper()
	var evs []*usagev1.UsageEvent
	for i := range n {
		ev := newEvent(t, "ops", i)
		evs = append(evs, ev)
		before := p.Stats().Published
		if err := p.Enqueue(handOver(ev)); err != nil {
			t.Fatal(err)
		}
		testkit.Wait(t, 10*time.Second, "published", func() bool { return p.Stats().Published == before+1 })
	}
	return evs
}

// TestSeqsContinue restarts a publisher on the same spool directory: the
// producer id stays and batch seqs go on from the last one, after a Close
// and after a publisher that was abandoned as a SIGKILL would leave it.
// Without the spool directory's files, a new producer starts at 1.
func TestSeqsContinue(t *testing.T) {
	cfg := Config{SpoolDir: t.TempDir(), FlushDelay: -1}
	srv := startServer(t)
	_, js := connect(t, srv, cfg)

	p1 := startPublisher(t, js, cfg)
	want := publishSome(t, p1, 3)
	closePublisher(t, p1)

	p2 := startPublisher(t, js, cfg)
	if p2.ProducerID() != p1.ProducerID() {
		t.Fatalf("producer id %q after a restart, was %q", p2.ProducerID(), p1.ProducerID())
	}
	want = append(want, publishSome(t, p2, 3)...)
	// p2 is abandoned, never closed: its files stay as a killed process
	// leaves them (what it wrote is in the page cache, not fsynced).
	p3 := startPublisher(t, js, cfg)
	want = append(want, publishSome(t, p3, 3)...)
	closePublisher(t, p3)

	msgs := streamMessages(t, js)
	checkOnce(t, msgs, want)
	checkSeqs(t, msgs, p1.ProducerID())
	if st := p3.Stats(); st.LastSeq != 9 {
		t.Errorf("last seq %d, want 9", st.LastSeq)
	}

	// A lost spool: a new producer.
	cfg.SpoolDir = t.TempDir()
	p4 := startPublisher(t, js, cfg)
	if p4.ProducerID() == p1.ProducerID() {
		t.Fatal("a new spool directory kept the producer id")
	}
	publishSome(t, p4, 1)
	closePublisher(t, p4)
	if st := p4.Stats(); st.LastSeq != 1 {
		t.Errorf("new producer's last seq %d, want 1", st.LastSeq)
	}
}

// TestSeqAfterMachineCrash leaves a "seq" file written during another boot
// (a machine crash lost its latest writes): the next publisher does not
// trust it, continues above the durably reserved ceiling, and marks that
// first batch resumed.
func TestSeqAfterMachineCrash(t *testing.T) {
	if bootID() == [16]byte{} {
		t.Skip("no boot id on this system")
	}
	cfg := Config{SpoolDir: t.TempDir(), FlushDelay: -1}
	srv := startServer(t)
	_, js := connect(t, srv, cfg)
	p1 := startPublisher(t, js, cfg)
	want := publishSome(t, p1, 3)
	// p1 is abandoned. Its "seq" file now says 3, written in the running
	// boot; make it an older boot's, with an older seq.
	n, err := openNumbering(cfg.SpoolDir)
	if err != nil {
		t.Fatal(err)
	}
	n.boot[0] ^= 0xff
	n.last = 1
	if err := n.writeSeq(); err != nil {
		t.Fatal(err)
	}
	_ = n.f.Close()
	// The stream would tell the truth; this restart happens without it.
	srv.shutdown()
	nc2, js2 := connectNoStream(t, srv)
	p2, err := NewPublisher(js2, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Enqueue(newEvent(t, "ops", 3)); err != nil {
		t.Fatal(err)
	}
	closePublisher(t, p2) // NATS is down: the batch goes to the spool
	nc2.Close()
	srv.restart()
	p3 := startPublisher(t, js, cfg)
	testkit.Wait(t, 10*time.Second, "spool drained", func() bool { return p3.Stats().Drained == 1 })
	closePublisher(t, p3)

	raw := streamBatches(t, js)
	if len(raw) != 4 {
		t.Fatalf("%d messages, want 4", len(raw))
	}
	var b usagev1.UsageBatch
	if err := DecodeMessage(raw[3].Data, &b); err != nil {
		t.Fatal(err)
	}
	if b.Seq != ceilingBlock+1 || !b.Resumed {
		t.Errorf("first batch after the crash: seq %d resumed %v, want %d resumed", b.Seq, b.Resumed, ceilingBlock+1)
	}
	want = append(want, b.Events...)
	checkOnce(t, streamMessages(t, js), want)
}

// connectNoStream connects to s, which may be down, without waiting for
// it.
func connectNoStream(t *testing.T, s *testServer) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.url(), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond), nats.NoCallbacksAfterClientClose())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// TestSeqFromStream loses the seq files but keeps the producer id: the
// publisher finds its last batch on the stream and continues after it.
func TestSeqFromStream(t *testing.T) {
	cfg := Config{SpoolDir: t.TempDir(), FlushDelay: -1}
	srv := startServer(t)
	_, js := connect(t, srv, cfg)
	p1 := startPublisher(t, js, cfg)
	want := publishSome(t, p1, 4)
	closePublisher(t, p1)
	for _, name := range []string{seqName, ceilingName} {
		if err := os.Remove(filepath.Join(cfg.SpoolDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	p2 := startPublisher(t, js, cfg)
	want = append(want, publishSome(t, p2, 2)...)
	closePublisher(t, p2)
	msgs := streamMessages(t, js)
	checkOnce(t, msgs, want)
	checkSeqs(t, msgs, p1.ProducerID())
}

// TestRepublishSameSeq publishes into a subject nobody acks: every batch
// times out, is spooled, and is published again once the stream exists,
// under the same producer and seq as the first time (had the first copy
// reached the stream, consumers would drop the second by its seq).
func TestRepublishSameSeq(t *testing.T) {
	srv := startServer(t)
	cfg := Config{SpoolDir: t.TempDir(), AckTimeout: 200 * time.Millisecond, FlushDelay: -1, BatchSize: 3}
	nc, js := connect(t, srv, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var first []string
	hole, err := nc.Subscribe(BatchSubjectPrefix+">", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		first = append(first, m.Header.Get(jetstream.MsgIDHeader))
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startPublisher(t, js, cfg)
	var want []*usagev1.UsageEvent
	for i := range 20 {
		ev := newEvent(t, "ops", i)
		want = append(want, ev)
		if err := p.Enqueue(handOver(ev)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Wait(t, 10*time.Second, "timed-out batches spooled", func() bool { return p.Stats().Spooled == 20 })
	if err := hole.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStream(ctx, js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 10*time.Second, "spool drained", func() bool { return p.Stats().Drained == 20 })
	closePublisher(t, p)
	msgs := streamMessages(t, js)
	checkOnce(t, msgs, want)
	// A drain read publishes several spooled batches at once: when the
	// stream comes back while they are on their way, the later ones of the
	// read can be stored before the first ones, which are republished by
	// the next read (the stream drops the copies of the others by id).
	checkSeqsWindowed(t, msgs, p.ProducerID())
	// The ids the stream holds, by batch seq (the stream's order may differ,
	// see above).
	var byBatch []stored
	for _, m := range msgs {
		if len(byBatch) == 0 || byBatch[len(byBatch)-1].msgID != m.msgID {
			byBatch = append(byBatch, m)
		}
	}
	slices.SortFunc(byBatch, func(a, b stored) int { return cmp.Compare(a.batchSeq, b.batchSeq) })
	var again []string
	for _, m := range byBatch {
		again = append(again, m.msgID)
	}
	mu.Lock()
	defer mu.Unlock()
	// Before the stream is back, a drain of the spool may already have
	// republished into the void: every attempt must carry the ids of the
	// first one, in the same order.
	seen := make(map[string]bool)
	first = slices.DeleteFunc(first, func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	})
	if len(first) == 0 || !slices.Equal(first, again) {
		t.Errorf("first publishes %v, republished %v: want the same (producer, seq)", first, again)
	}
}

// TestWindowHoldsBack publishes single-event batches that are never acked:
// no more than WindowSize batches are sent past the oldest unacked one,
// however many publishes MaxPending allows.
func TestWindowHoldsBack(t *testing.T) {
	srv := startServer(t)
	cfg := Config{SpoolDir: t.TempDir(), AckTimeout: time.Minute, FlushDelay: -1, BatchSize: 1,
		MaxPending: WindowSize + 500, Buffer: WindowSize + 1000}
	nc, js := connect(t, srv, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent int
	hole, err := nc.Subscribe(BatchSubjectPrefix+">", func(*nats.Msg) { mu.Lock(); sent++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hole.Unsubscribe() }()
	p := startPublisher(t, js, cfg)
	for i := range WindowSize + 200 {
		if err := p.Enqueue(newEvent(t, "ops", i)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Wait(t, 10*time.Second, "window full", func() bool { return p.Stats().Pending == WindowSize })
	time.Sleep(100 * time.Millisecond)
	if st := p.Stats(); st.Pending != WindowSize || st.LastSeq != WindowSize+1 {
		t.Errorf("stats %+v: want %d pending and one batch held back", st, WindowSize)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if sent != WindowSize {
		t.Errorf("%d batches sent, want %d", sent, WindowSize)
	}
	mu.Unlock()
	cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer ccancel()
	if err := p.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Spooled != WindowSize+200 || st.Dropped != 0 {
		t.Errorf("after close: %+v", st)
	}
}

// TestLegacySpoolDrains starts on a spool written before batches existed
// (one UsageEvent per record): those are published as before, on their
// department's subject with their event id as Nats-Msg-Id, and the events
// queued meanwhile follow them as batches, in order.
func TestLegacySpoolDrains(t *testing.T) {
	dir := t.TempDir()
	s, err := openSpool(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var want []*usagev1.UsageEvent
	for i := range 10 {
		ev := newEvent(t, []string{"finance", "eu.sales"}[i%2], i)
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.append(b); err != nil {
			t.Fatal(err)
		}
		want = append(want, ev)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t)
	var got acks
	cfg := Config{SpoolDir: dir, OnAck: got.onAck}
	nc, js := connect(t, srv, cfg)
	srv.shutdown()
	testkit.Wait(t, 10*time.Second, "client to see the outage", func() bool { return !nc.IsConnected() })
	p := startPublisher(t, js, cfg)
	for i := range 5 {
		ev := newEvent(t, "ops", 10+i)
		want = append(want, ev)
		if err := p.Enqueue(handOver(ev)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Wait(t, 10*time.Second, "new events spooled", func() bool { return p.Stats().Spooled == 5 })
	srv.restart()
	testkit.Wait(t, 10*time.Second, "spool drained", func() bool { return p.Stats().Drained == 15 })
	closePublisher(t, p)
	msgs := streamMessages(t, js)
	checkOnce(t, msgs, want)
	got.check(t, msgs)
	for i, m := range msgs {
		if m.ev.GetEventId() != want[i].GetEventId() {
			t.Fatalf("stream position %d holds %s, want %s: order lost", i, m.ev.GetEventId(), want[i].GetEventId())
		}
		if legacy := i < 10; legacy != (m.producer == "") {
			t.Fatalf("event %d: producer %q", i, m.producer)
		}
	}
	checkSeqs(t, msgs[10:], p.ProducerID())
	if st := p.Stats(); st.BatchesDrained < 11 || st.Corrupt != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestProducerFiles checks the files that keep a producer's identity and
// numbering: written on start and Close, and a damaged id refused.
func TestProducerFiles(t *testing.T) {
	dir := t.TempDir()
	n, err := openNumbering(dir)
	if err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= ceilingBlock+2; want++ {
		seq, resumed, err := n.next()
		if err != nil || seq != want || resumed {
			t.Fatalf("next: %d %v %v, want %d", seq, resumed, err, want)
		}
	}
	if n.ceiling != 2*ceilingBlock {
		t.Errorf("ceiling %d, want %d", n.ceiling, 2*ceilingBlock)
	}
	if c, exact, ok := n.load(ceilingName); !ok || exact || c != 2*ceilingBlock {
		t.Errorf("ceiling file: %d exact %v ok %v", c, exact, ok)
	}
	if err := n.close(); err != nil {
		t.Fatal(err)
	}
	if c, exact, ok := n.load(ceilingName); !ok || !exact || c != ceilingBlock+2 {
		t.Errorf("ceiling file after close: %d exact %v ok %v", c, exact, ok)
	}
	n2, err := openNumbering(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n2.id != n.id || n2.last != ceilingBlock+2 || n2.resumed {
		t.Errorf("reopened: id %q last %d resumed %v", n2.id, n2.last, n2.resumed)
	}
	_ = n2.f.Close()
	if err := os.WriteFile(filepath.Join(dir, producerName), []byte("not/valid\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := openNumbering(dir); err == nil {
		t.Error("a damaged producer id file was accepted")
	}
}

// TestBatchFitsMaxPayload publishes to a server with a small max_payload:
// batches are cut to fit it, however large BatchBytes is.
func TestBatchFitsMaxPayload(t *testing.T) {
	const maxPayload = 16 << 10
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		MaxPayload: maxPayload, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	cfg := Config{SpoolDir: t.TempDir(), BatchBytes: 1 << 20, BatchSize: 1000}
	_, js := connectURL(t, ns.ClientURL(), cfg)
	p, err := NewPublisher(js, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []*usagev1.UsageEvent
	for i := range 500 {
		ev := newEvent(t, "ops", i)
		want = append(want, ev)
		if err := p.Enqueue(handOver(ev)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	testkit.Wait(t, 10*time.Second, "published", func() bool { return p.Stats().Published == 500 })
	closePublisher(t, p)
	msgs := streamMessages(t, js)
	checkOnce(t, msgs, want)
	checkSeqs(t, msgs, p.ProducerID())
	for _, m := range msgs {
		if m.size > maxPayload-payloadHeadroom {
			t.Fatalf("a batch of %d bytes, over max_payload %d less headroom", m.size, maxPayload)
		}
	}
	if st := p.Stats(); st.Failed != 0 || st.BatchesPublished < 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestCompressionNamesMatchConfig: the config validates usage.compression
// against its own copy of the names (pkg/config imports nothing above it),
// so the two must agree.
func TestCompressionNamesMatchConfig(t *testing.T) {
	if CompressionS2 != config.CompressionS2 || CompressionNone != config.CompressionNone {
		t.Fatalf("usage %q/%q, config %q/%q", CompressionS2, CompressionNone, config.CompressionS2, config.CompressionNone)
	}
}
