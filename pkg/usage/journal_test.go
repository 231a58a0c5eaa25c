package usage

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// TestBegunRecovered: a publisher tracks four kinds of request when its
// process is killed (its spool directory copied as the page cache holds it,
// then never touched by it again):
//
//   - finished: their events were published;
//   - spooled: their events went to the spool (NATS down), and the kill
//     came before the done records were written (they are cut from the
//     copy);
//   - streams: begun, with progress, never finished;
//   - calls: begun non-stream calls, never finished.
//
// A publisher started on the copy publishes the spooled events as they
// were and one recovered event for each stream and call (with its own
// event id, the recovery rule's counts, marked recovered and estimated),
// none for the finished or spooled requests. A second start on the same
// directory publishes nothing more.
func TestBegunRecovered(t *testing.T) {
	cfg := Config{SpoolDir: t.TempDir(), FlushDelay: -1}
	srv := startServer(t)
	_, js := connect(t, srv, cfg)
	p, err := NewPublisher(js, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, kill := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()

	begin := func(i int, stream bool) *Begun {
		ev := newEvent(t, "research", i)
		b := &Begun{EventID: ev.EventId, RequestID: ev.RequestId, Timestamp: ev.Timestamp, Dept: "research",
			Team: "research/ml", Subject: "alice", RequestedModel: "gpt-4o-mini", Provider: "openai",
			Endpoint: "/v1/chat/completions", Stream: stream, PromptTokens: 100, MaxCompletionTokens: 1000,
			ReservedNano: 5_000_000, PromptCostNano: 15_000, OutputPerM: 600_000}
		p.Begin(b)
		return b
	}
	final := func(b *Begun, i int) *usagev1.UsageEvent {
		ev := newEvent(t, "research", i)
		ev.EventId = b.EventID
		if err := p.Enqueue(handOver(ev)); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	var want []*usagev1.UsageEvent
	var streams, calls, spooled []*Begun
	for i := range 5 {
		want = append(want, final(begin(i, true), i))
	}
	testkit.Wait(t, 10*time.Second, "finished published", func() bool { return p.Stats().Published == 5 })
	for i := range 4 {
		b := begin(10+i, true)
		streams = append(streams, b)
		p.Progress(b.EventID, 40)
		p.Progress(b.EventID, uint64(50+i))
	}
	for i := range 3 {
		calls = append(calls, begin(20+i, false))
	}
	testkit.Wait(t, 10*time.Second, "begun records written", func() bool { return len(readBegun(t, cfg.SpoolDir)) == 7 })

	srv.shutdown()
	for i := range 3 {
		b := begin(30+i, true)
		spooled = append(spooled, b)
		testkit.Wait(t, 10*time.Second, "begun record written", func() bool { return readBegun(t, cfg.SpoolDir)[b.EventID] != nil })
		want = append(want, final(b, 30+i))
	}
	testkit.Wait(t, 10*time.Second, "spooled", func() bool { return p.Stats().Spooled == 3 })
	testkit.Wait(t, 10*time.Second, "done records written", func() bool { return len(readBegun(t, cfg.SpoolDir)) == 7 })

	// The kill: the directory as the page cache holds it, without the done
	// records of the spooled events (killed between the spool's write and
	// the begun file's).
	dir := t.TempDir()
	copyDir(t, cfg.SpoolDir, dir)
	cutDone(t, dir, spooled)
	// The killed process does nothing more in the copy (its own directory
	// takes what stopping it writes).
	kill()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if got := len(readBegun(t, dir)); got != 10 {
		t.Fatalf("%d open requests in the copy, want 10", got)
	}

	srv.start()
	cfg.SpoolDir = dir
	p2 := startPublisher(t, js, cfg)
	if st := p2.Stats(); st.Recovered != 7 {
		t.Fatalf("recovered %d, want 7", st.Recovered)
	}
	for _, b := range append(streams, calls...) {
		want = append(want, &usagev1.UsageEvent{EventId: b.EventID})
	}
	testkit.Wait(t, 10*time.Second, "drained", func() bool { return p2.Stats().Drained == 10 })
	closePublisher(t, p2)

	msgs := streamMessages(t, js)
	checkOnce(t, msgs, want)
	got := map[string]*usagev1.UsageEvent{}
	for _, m := range msgs {
		got[m.ev.EventId] = m.ev
	}
	for i, b := range streams {
		ev := got[b.EventID]
		// Progress 40 then 50+i: 50+i relayed, plus the 10+i of the last
		// interval.
		wantTokens := uint64(50+i) + uint64(10+i)
		if !ev.Recovered || !ev.Estimated || ev.CompletionTokens != wantTokens || ev.PromptTokens != 100 {
			t.Errorf("stream %d: recovered %v estimated %v completion %d prompt %d, want true true %d 100",
				i, ev.Recovered, ev.Estimated, ev.CompletionTokens, ev.PromptTokens, wantTokens)
		}
		if wantCost := int64(15_000) + outputCost(wantTokens, 600_000); ev.CostNanoUsd != wantCost {
			t.Errorf("stream %d: cost %d, want %d", i, ev.CostNanoUsd, wantCost)
		}
		if ev.Team != "research/ml" || ev.Subject != "alice" || ev.ErrorType != ErrorGatewayLost {
			t.Errorf("stream %d: team %q subject %q error %q", i, ev.Team, ev.Subject, ev.ErrorType)
		}
	}
	for i, b := range calls {
		if ev := got[b.EventID]; !ev.Recovered || ev.CostNanoUsd != b.ReservedNano || ev.CompletionTokens != 1000 {
			t.Errorf("call %d: recovered %v cost %d completion %d, want the reservation", i, ev.Recovered, ev.CostNanoUsd, ev.CompletionTokens)
		}
	}
	for _, b := range spooled {
		if got[b.EventID].Recovered {
			t.Errorf("spooled event %s billed as recovered", b.EventID)
		}
	}

	// Recovery twice: nothing more.
	p3 := startPublisher(t, js, cfg)
	if st := p3.Stats(); st.Recovered != 0 {
		t.Fatalf("second start recovered %d", st.Recovered)
	}
	closePublisher(t, p3)
	if n := len(streamMessages(t, js)); n != len(msgs) {
		t.Fatalf("stream holds %d events after a second start, want %d", n, len(msgs))
	}
}

// TestBegunClosedByGracefulStop: requests that finished leave nothing open,
// and a clean Close keeps those still open for the next start.
func TestBegunClosedByGracefulStop(t *testing.T) {
	cfg := Config{SpoolDir: t.TempDir(), FlushDelay: -1}
	srv := startServer(t)
	_, js := connect(t, srv, cfg)
	p := startPublisher(t, js, cfg)
	open := &Begun{EventID: "open-1", Dept: "ops", Stream: true, OutputPerM: 1_000_000}
	p.Begin(open)
	for i := range 20 {
		ev := newEvent(t, "ops", i)
		p.Begin(&Begun{EventID: ev.EventId, Dept: "ops"})
		if err := p.Enqueue(handOver(ev)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Wait(t, 10*time.Second, "published", func() bool { return p.Stats().Published == 20 })
	closePublisher(t, p)
	if got := readBegun(t, cfg.SpoolDir); len(got) != 1 || got["open-1"] == nil {
		t.Fatalf("open after close: %v, want open-1 only", keys(got))
	}
	p2 := startPublisher(t, js, cfg)
	if st := p2.Stats(); st.Recovered != 1 || st.Begun != 0 {
		t.Fatalf("recovered %d begun %d, want 1 0", st.Recovered, st.Begun)
	}
}

// TestRecoveredRule is the recovery rule, row by row.
func TestRecoveredRule(t *testing.T) {
	for _, tc := range []struct {
		name         string
		b            Begun
		tokens, prev uint64
		completion   uint64
		cost         int64
	}{
		{"stream, no progress", Begun{Stream: true, PromptCostNano: 10, OutputPerM: 1_000_000}, 0, 0, 0, 10},
		{"stream, extrapolates one interval", Begun{Stream: true, PromptCostNano: 10, OutputPerM: 1_000_000}, 30, 20, 40, 50},
		{"stream, capped by the output limit", Begun{Stream: true, MaxCompletionTokens: 35, OutputPerM: 1_000_000}, 30, 20, 35, 35},
		{"stream, capped by the reservation", Begun{Stream: true, ReservedNano: 25, OutputPerM: 1_000_000}, 30, 20, 40, 25},
		{"call, billed its reservation", Begun{MaxCompletionTokens: 100, ReservedNano: 77, OutputPerM: 1_000_000}, 0, 0, 100, 77},
		{"call, no reservation", Begun{MaxCompletionTokens: 100, PromptCostNano: 5, OutputPerM: 1_000_000}, 0, 0, 100, 105},
		{"huge price saturates", Begun{Stream: true, OutputPerM: 1 << 62}, 1 << 62, 0, 1 << 63, 1<<63 - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := Recovered(&tc.b, tc.tokens, tc.prev)
			if ev.CompletionTokens != tc.completion || ev.CostNanoUsd != tc.cost || !ev.Recovered || !ev.Estimated {
				t.Fatalf("completion %d cost %d recovered %v estimated %v, want %d %d true true",
					ev.CompletionTokens, ev.CostNanoUsd, ev.Recovered, ev.Estimated, tc.completion, tc.cost)
			}
		})
	}
}

func keys(m map[string]*openReq) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// readBegun returns the open requests of the begun file in dir, read as a
// start would read them.
func readBegun(t testing.TB, dir string) map[string]*openReq {
	t.Helper()
	j := &journal{dir: dir, crc: crc32.MakeTable(crc32.Castagnoli)}
	found, err := j.read()
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// cutDone removes the done records of bs from the begun file in dir.
func cutDone(t testing.TB, dir string, bs []*Begun) {
	t.Helper()
	cut := map[string]bool{}
	for _, b := range bs {
		cut[b.EventID] = true
	}
	path := filepath.Join(dir, journalName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for off := 0; off+recHeader <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		rec := data[off : off+recHeader+n]
		off += recHeader + n
		one := map[string]*openReq{}
		for id := range cut {
			one[id] = &openReq{}
		}
		if p := rec[recHeader:]; p[0] == kindDone {
			applyJournalRecord(one, p)
			if len(one) < len(cut) {
				continue // a done record of one of bs
			}
		}
		out = append(out, rec...)
	}
	if err := os.WriteFile(path, out, 0o640); err != nil {
		t.Fatal(err)
	}
}

// copyDir copies the regular files of src into dst.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		_ = in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJournalFile: the begun file through closed pairs, a compaction and a
// torn tail. Requests closed before their record was written leave
// nothing; compaction keeps only the open ones (with their progress); a
// record cut short by a kill is skipped and what follows it is read.
func TestJournalFile(t *testing.T) {
	dir := t.TempDir()
	j, found, err := openJournal(dir)
	if err != nil || len(found) != 0 {
		t.Fatalf("open: %v, %d found", err, len(found))
	}
	old := time.Unix(0, 0)
	now := time.Unix(100, 0)
	// Closed before the flush: nothing written.
	j.begin(&Begun{EventID: "quick", Timestamp: old.UnixNano()})
	j.done("quick")
	// Young: held back.
	j.begin(&Begun{EventID: "young", Timestamp: now.UnixNano()})
	if err := j.flush(now); err != nil || j.size != 0 {
		t.Fatalf("flush: %v, %d bytes written, want 0", err, j.size)
	}
	j.begin(&Begun{EventID: "long", Timestamp: old.UnixNano(), Dept: "eng", Stream: true, OutputPerM: 7})
	j.progress("long", 5)
	// Closed pairs until the file passes the compaction size and is
	// rewritten.
	for i, last := 0, int64(0); j.size >= last; i++ {
		if i > 2*journalCompactAt/200 {
			t.Fatalf("no compaction after %d closed pairs, %d bytes", i, j.size)
		}
		last = j.size
		id := fmt.Sprintf("pair-%d", i)
		j.begin(&Begun{EventID: id, Timestamp: old.UnixNano(), Dept: "eng", RequestedModel: strings.Repeat("m", 200)})
		if err := j.flush(now); err != nil {
			t.Fatal(err)
		}
		j.done(id)
		if i == 10 {
			j.progress("long", 9)
		}
	}
	if err := j.flush(now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if j.size > 4096 {
		t.Fatalf("the file holds %d bytes after compaction", j.size)
	}
	got := readBegun(t, dir)
	if len(got) != 2 || got["long"] == nil || got["young"] == nil || got["long"].tokens != 9 || got["long"].prev != 5 ||
		got["long"].b.Dept != "eng" || got["long"].b.OutputPerM != 7 {
		t.Fatalf("open after compaction: %v", keys(got))
	}
	// A torn record, then one more written after it.
	if _, err := j.f.WriteAt([]byte{200, 0, 0, 0, 1, 2, 3}, j.size); err != nil {
		t.Fatal(err)
	}
	j.size += 7
	j.done("young")
	if err := j.flush(now); err != nil {
		t.Fatal(err)
	}
	if got := readBegun(t, dir); len(got) != 1 || got["long"] == nil {
		t.Fatalf("open after a torn record: %v", keys(got))
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
}

// FuzzJournalRecord: any bytes as a record of the begun file, or as the
// whole file, are read without a panic, and a begun record read back
// tracks what was written.
func FuzzJournalRecord(f *testing.F) {
	j := &journal{crc: crc32.MakeTable(crc32.Castagnoli), open: map[string]*openReq{}}
	o := &openReq{b: Begun{EventID: "e1", Dept: "d", Stream: true, PromptTokens: 3, ReservedNano: 9}, tokens: 4, prev: 2}
	f.Add(append([]byte(nil), j.encodeBegun(o)...))
	f.Add(append([]byte(nil), j.encodeProgress(o)...))
	f.Add([]byte{kindDone, 10, 2, 'e', '1'})
	f.Add([]byte{kindBegun, 10, 200})
	f.Fuzz(func(t *testing.T, p []byte) {
		open := map[string]*openReq{}
		applyJournalRecord(open, p)
		for id, o := range open {
			if id != o.b.EventID || id == "" {
				t.Fatalf("open under %q: %q", id, o.b.EventID)
			}
			// What is read writes back to the same record.
			again := map[string]*openReq{}
			applyJournalRecord(again, j.encodeBegun(o))
			if a := again[id]; a == nil || a.b != o.b || a.tokens != o.tokens || a.prev != o.prev {
				t.Fatalf("begun %+v read back as %+v", o.b, again[id])
			}
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, journalName), p, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadUnfinished(dir); err != nil {
			t.Fatal(err)
		}
	})
}
