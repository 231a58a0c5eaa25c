package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/pkg/budget"
	"github.com/tollgate/tollgate/pkg/chstore"
	"github.com/tollgate/tollgate/pkg/reconcile"
	"github.com/tollgate/tollgate/pkg/replay"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"

	"github.com/tollgate/tollgate/pkg/testkit"
)

// traffic is the requests of the end-to-end test: what each sends, its
// expected status, and whether the gateway bills it from the upstream's
// usage (a served answer at the mock).
var traffic = []struct {
	name   string
	path   string
	body   string
	dept   string
	models []string
	status int
	served bool
	abort  bool
}{
	{name: "chat", path: "/v1/chat/completions", body: `{"model":"mock-gpt","messages":[{"role":"user","content":"one two three"}]}`, dept: "research", status: 200, served: true},
	{name: "chat, longer answer", path: "/v1/chat/completions", body: `{"model":"mock-gpt","messages":[{"role":"user","content":"one"}],"mock":{"words":9}}`, dept: "research", status: 200, served: true},
	{name: "chat without dept", path: "/v1/chat/completions", body: `{"model":"mock-gpt","messages":[{"role":"user","content":"one two"}]}`, status: 200, served: true},
	{name: "stream with usage", path: "/v1/chat/completions", body: `{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, dept: "ops", status: 200, served: true},
	{name: "stream, gateway asks usage", path: "/v1/chat/completions", body: `{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hi there"}]}`, dept: "ops", status: 200, served: true},
	{name: "completions", path: "/v1/completions", body: `{"model":"mock-gpt","prompt":"a b c d"}`, dept: "research", status: 200, served: true},
	{name: "embeddings", path: "/v1/embeddings", body: `{"model":"mock-embed","input":["a b","c"]}`, dept: "research", status: 200, served: true},
	{name: "fallback after an upstream 503", path: "/v1/chat/completions", body: `{"model":"flaky-gpt","messages":[{"role":"user","content":"retry me"}]}`, dept: "ops", status: 200, served: true},
	{name: "upstream cuts the stream", path: "/v1/chat/completions", body: `{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"cut"}],"mock":{"cut_after":2}}`, dept: "ops", status: 200},
	{name: "client aborts the stream", path: "/v1/chat/completions", body: `{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"bye"}],"mock":{"chunks":8,"chunk_delay_ms":100}}`, dept: "ops", status: 200, abort: true},
	{name: "model not allowed", path: "/v1/chat/completions", body: `{"model":"mock-gpt","messages":[{"role":"user","content":"no"}]}`, dept: "research", models: []string{"other-*"}, status: 403},
}

func TestReconcileEndToEnd(t *testing.T) {
	r := newRig(t)
	var events, served int64
	for _, tr := range traffic {
		tok := r.token(tr.dept, tr.models)
		if tr.abort {
			r.abortStream(tok, tr.body)
		} else if status, body := r.post(tr.path, tok, tr.body); status != tr.status {
			t.Fatalf("%s: status %d, want %d: %s", tr.name, status, tr.status, body)
		}
		events++
		if tr.served {
			served++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src := reconcile.Sources{JetStream: r.js, Budgets: true, ClickHouse: r.store.Conn(), MockURL: r.mockURL}
	run := func(t *testing.T, wait time.Duration) reconcile.Report {
		t.Helper()
		rep, err := reconcile.Run(ctx, src, reconcile.Options{Wait: wait})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}

	t.Run("all sources agree", func(t *testing.T) {
		rep := run(t, 15*time.Second)
		if !rep.OK || len(rep.Differences) != 0 {
			t.Fatalf("report not ok: %s", dump(rep))
		}
		st, _ := rep.Source(reconcile.SourceStream)
		if st.Requests != events || st.Extra["served_requests"] != served || st.Extra["duplicates"] != 0 {
			t.Errorf("stream %+v, want %d events, %d served, no duplicates", st, events, served)
		}
		for _, name := range []string{reconcile.SourceClickHouse, reconcile.SourceBudgets} {
			s, ok := rep.Source(name)
			if !ok || s.Requests != st.Requests || s.CostNanoUSD != st.CostNanoUSD {
				t.Errorf("%s %+v, stream %+v", name, s, st)
			}
		}
		m, _ := rep.Source(reconcile.SourceMock)
		if m.Requests != served || m.CostNanoUSD != st.Extra["served_cost_nano_usd"] || m.CostNanoUSD <= 0 || m.Extra["incomplete"] < 1 {
			t.Errorf("mock %+v, stream %+v", m, st)
		}
		if rep.Range.Budgets != "total" {
			t.Errorf("budgets compared over %q, want total", rep.Range.Budgets)
		}
	})

	today := time.Now().UTC().Truncate(24 * time.Hour)
	ranges := []struct {
		name         string
		since, until time.Time
		budgets      string
		sources      int
	}{
		{"today, whole day", today, today.Add(24 * time.Hour), "days " + today.Format(time.DateOnly) + ".." + today.Format(time.DateOnly), 4},
		{"from today, open", today, time.Time{}, "days " + today.Format(time.DateOnly) + "..", 4},
		{"part of a day", today.Add(time.Minute), time.Time{}, "none", 2},
	}
	for _, rg := range ranges {
		t.Run("range "+rg.name, func(t *testing.T) {
			rep, err := reconcile.Run(ctx, src, reconcile.Options{Since: rg.since, Until: rg.until})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK || rep.Range.Budgets != rg.budgets || len(rep.Sources) != rg.sources {
				t.Errorf("range %+v, %d sources, want %q and %d: %s", rep.Range, len(rep.Sources), rg.budgets, rg.sources, dump(rep))
			}
			if rg.sources == 2 && len(rep.Notes) == 0 {
				t.Error("a partial range is not noted")
			}
		})
	}

	t.Run("skewed budget total", func(t *testing.T) {
		key := budget.TotalID{Scope: budget.ScopeGlobal, Period: budget.PeriodTotal}.Key()
		e, err := r.kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var tot usagev1.SpendTotal
		if err := proto.Unmarshal(e.Value(), &tot); err != nil {
			t.Fatal(err)
		}
		tot.CostNanoUsd += 7
		skewed, _ := proto.Marshal(&tot)
		if _, err := r.kv.Put(ctx, key, skewed); err != nil {
			t.Fatal(err)
		}
		rep := run(t, 0)
		wantDiff(t, rep, "budgets global totals:", "7 nano-USD more")
		if _, err := r.kv.Put(ctx, key, e.Value()); err != nil {
			t.Fatal(err)
		}
		if rep := run(t, 0); !rep.OK {
			t.Fatalf("not ok after restoring the total: %s", dump(rep))
		}
	})

	t.Run("missing clickhouse row", func(t *testing.T) {
		conn := r.store.Conn()
		var id string
		var seq uint64
		if err := conn.QueryRow(ctx, "SELECT event_id, stream_seq FROM usage_events WHERE cost_nano_usd > 0 LIMIT 1").Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		if err := conn.Exec(ctx, "ALTER TABLE usage_events DELETE WHERE event_id = ?", id); err != nil {
			t.Fatal(err)
		}
		testkit.Wait(t, 15*time.Second, "the condition", func() bool {
			var n uint64
			return conn.QueryRow(ctx, "SELECT count() FROM usage_events WHERE event_id = ?", id).Scan(&n) == nil && n == 0
		})
		rep := run(t, 0)
		wantDiff(t, rep, "clickhouse:", "1 request fewer")
		// Put it back the way operators would: replay its sequence.
		if _, err := replay.Run(ctx, r.js, replay.Options{FromSeq: seq, ToSeq: seq}, replay.NewClickHouse(conn, false)); err != nil {
			t.Fatal(err)
		}
		if rep := run(t, 0); !rep.OK {
			t.Fatalf("not ok after the replay: %s", dump(rep))
		}
	})

	t.Run("extra mock answer", func(t *testing.T) {
		resp := r.send(r.mockURL+"/v1/chat/completions", "", `{"model":"mock-gpt","messages":[{"role":"user","content":"direct"}]}`)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("mock answered %d", resp.StatusCode)
		}
		rep := run(t, 0)
		wantDiff(t, rep, "mock served answers:", "1 request more")
		if len(rep.Differences) != 1 {
			t.Errorf("differences beyond the mock's: %s", dump(rep))
		}
	})

	// caughtUp waits until the budget and analytics consumers have taken
	// every message of the stream.
	caughtUp := func(t *testing.T) {
		t.Helper()
		testkit.Wait(t, 15*time.Second, "the condition", func() bool {
			s, err := r.js.Stream(ctx, usage.StreamName)
			if err != nil {
				return false
			}
			last := s.CachedInfo().State.LastSeq
			if info, err := s.Info(ctx); err == nil {
				last = info.State.LastSeq
			}
			for _, durable := range []string{"budget", chstore.DefaultDurable} {
				c, err := s.Consumer(ctx, durable)
				if err != nil {
					return false
				}
				info, err := c.Info(ctx)
				if err != nil || info.AckFloor.Stream < last {
					return false
				}
			}
			return true
		})
	}

	t.Run("batch republished past the duplicate window", func(t *testing.T) {
		s, err := r.js.Stream(ctx, usage.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := s.GetMsg(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		var b usagev1.UsageBatch
		if err := usage.DecodeMessage(raw.Data, &b); err != nil || b.ProducerId == "" {
			t.Fatalf("first message is not a batch: %v %v", b.ProducerId, err)
		}
		// A republish after the dedupe window: the same batch, a new message.
		msg := &nats.Msg{Subject: raw.Subject, Data: raw.Data, Header: nats.Header{"Nats-Msg-Id": []string{usage.BatchMsgID(b.ProducerId, b.Seq) + "-again"}}}
		if _, err := r.js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		caughtUp(t)
		rep := run(t, 0)
		// Only the extra mock answer of the case above may differ.
		for _, d := range rep.Differences {
			if !strings.HasPrefix(d, "mock served answers:") {
				t.Errorf("a republished batch made a difference: %s", d)
			}
		}
		st, _ := rep.Source(reconcile.SourceStream)
		n := int64(len(b.Events))
		if st.Requests != events || st.Extra["raw_requests"] != events+n || st.Extra["duplicate_batches"] != 1 {
			t.Errorf("stream %+v, want %d unique of %d events and 1 duplicate batch", st, events, events+n)
		}
		if bs, _ := rep.Source(reconcile.SourceBudgets); bs.Requests != events {
			t.Errorf("budgets count %d requests, want %d", bs.Requests, events)
		}
		if c, _ := rep.Source(reconcile.SourceClickHouse); c.Requests != events || c.Extra["raw_rows"] != events {
			t.Errorf("clickhouse %+v, want %d rows, none twice", c, events)
		}
	})

	t.Run("legacy event republished", func(t *testing.T) {
		s, err := r.js.Stream(ctx, usage.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := s.GetMsg(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		var b usagev1.UsageBatch
		if err := usage.DecodeMessage(raw.Data, &b); err != nil {
			t.Fatal(err)
		}
		// The event of that batch again, as a single-event message of a
		// gateway from before batches: nothing tells its consumers it was
		// counted already but its event id.
		data, err := proto.Marshal(b.Events[0])
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: usage.Subject(b.Events[0].Dept), Data: data, Header: nats.Header{"Nats-Msg-Id": []string{b.Events[0].EventId + "-again"}}}
		if _, err := r.js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		caughtUp(t)
		rep := run(t, 0)
		st, _ := rep.Source(reconcile.SourceStream)
		if st.Requests != events || st.Extra["legacy_duplicates"] != 1 {
			t.Errorf("stream %+v, want %d unique and 1 legacy duplicate", st, events)
		}
		wantDiff(t, rep, "budgets global totals:", "1 request more")
		wantDiff(t, rep, "budgets:", "1 duplicate message")
		for _, d := range rep.Differences {
			if strings.HasPrefix(d, "clickhouse") {
				t.Errorf("clickhouse flagged, but it dedupes by event id: %s", d)
			}
		}
	})
}

// wantDiff fails unless rep is not OK and has a difference starting with
// prefix and containing text.
func wantDiff(t *testing.T, rep reconcile.Report, prefix, text string) {
	t.Helper()
	if rep.OK {
		t.Fatalf("report ok, want a %q difference: %s", prefix, dump(rep))
	}
	for _, d := range rep.Differences {
		if strings.HasPrefix(d, prefix) && strings.Contains(d, text) {
			return
		}
	}
	t.Errorf("no difference %q ... %q in %s", prefix, text, dump(rep))
}

func dump(rep reconcile.Report) string {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Sprint(rep)
	}
	return string(b)
}
