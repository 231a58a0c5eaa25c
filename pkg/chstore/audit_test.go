package chstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/audit"
)

func countAudit(t *testing.T, s *Store) uint64 {
	t.Helper()
	var n uint64
	if err := s.conn.QueryRow(context.Background(), "SELECT count() FROM audit_events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// fetchAll reads every message of the audit stream through a new durable
// consumer, the way a redelivery or a rewound consumer would see them.
func fetchAll(t *testing.T, js jetstream.JetStream, durable string) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	c, err := js.CreateOrUpdateConsumer(ctx, audit.Stream, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fetch(100, jetstream.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	return msgs
}

func TestAuditLoaderExactlyOnce(t *testing.T) {
	s := newStore(t, ch.Addr(t))
	js := newJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := audit.NewRecorder(js, audit.Options{})
	at := time.Date(2026, 12, 1, 9, 30, 15, 250e6, time.UTC)
	events := []audit.Event{
		{ID: "e1", Time: at, Actor: "alice", Action: audit.ActionTokenRevoked, Target: "jti:k1",
			After: json.RawMessage(`{"kind":"jti","value":"k1"}`), Summary: "revoked jti:k1"},
		{ID: "e2", Time: at.Add(time.Minute), Actor: "signal", Action: audit.ActionConfigReloaded, Target: "tollgate.yaml",
			Before: json.RawMessage(`{"budgets[0].amount_usd":"5"}`), After: json.RawMessage(`{"budgets[0].amount_usd":"10"}`),
			Summary: `budgets[0].amount_usd: "5" -> "10"`},
		{ID: "e2", Time: at.Add(time.Minute), Actor: "signal", Action: audit.ActionConfigReloaded}, // a retried publish
	}
	for _, e := range events {
		if err := rec.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	l := NewAuditLoader(s, js, 1, 100*time.Millisecond, nil)

	steps := []struct {
		name    string
		durable string
		want    uint64
	}{
		{"first delivery", "first", 2},
		{"redelivery of stored events", "again", 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			msgs := fetchAll(t, js, st.durable)
			if len(msgs) != 2 {
				t.Fatalf("%d messages, want 2 (the retry deduped by the stream)", len(msgs))
			}
			if err := l.Load(ctx, msgs); err != nil {
				t.Fatal(err)
			}
			if n := countAudit(t, s); n != st.want {
				t.Errorf("%d rows, want %d", n, st.want)
			}
		})
	}

	// The running loader stores what was not stored yet, once.
	if err := rec.Record(ctx, audit.Event{ID: "e3", Actor: "bob", Action: audit.ActionBudgetChanged, Target: "budgets"}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(rctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for countAudit(t, s) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a second insert, if any, would land now
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := countAudit(t, s); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	var ts time.Time
	var tsMS uint64
	var actor, after, summary string
	if err := s.conn.QueryRow(ctx, "SELECT ts, ts_ms, actor, after, summary FROM audit_events WHERE id = 'e2'").
		Scan(&ts, &tsMS, &actor, &after, &summary); err != nil {
		t.Fatal(err)
	}
	if !ts.Equal(at.Add(time.Minute).Truncate(time.Second)) || tsMS != uint64(at.Add(time.Minute).UnixMilli()) ||
		actor != "signal" || after != `{"budgets[0].amount_usd":"10"}` || summary != `budgets[0].amount_usd: "5" -> "10"` {
		t.Errorf("row e2: %v %d %q %q %q", ts, tsMS, actor, after, summary)
	}
}
