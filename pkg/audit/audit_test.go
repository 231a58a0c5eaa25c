package audit

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/natstest"
)

func startJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestRecord(t *testing.T) {
	js := startJS(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r := NewRecorder(js, Options{Now: func() time.Time { return at }})

	// The stream does not exist yet: Record creates it.
	if err := r.Record(ctx, Event{Actor: "alice", Action: ActionTokenRevoked, Target: "jti:k1",
		After: json.RawMessage(`{"kind":"jti"}`), Summary: "revoked jti:k1"}); err != nil {
		t.Fatal(err)
	}
	// A retried publish (same id) is stored once.
	retry := Event{ID: "fixed-id", Time: at.Add(time.Second), Actor: "bob", Action: ActionConfigReloaded, Target: "tollgate.yaml"}
	for range 2 {
		if err := r.Record(ctx, retry); err != nil {
			t.Fatal(err)
		}
	}
	events, err := List(ctx, js, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(events), events)
	}
	first := events[0]
	if first.ID == "" || !first.Time.Equal(at) || first.Actor != "alice" || string(first.After) != `{"kind":"jti"}` {
		t.Errorf("first event %+v", first)
	}
	if events[1].ID != "fixed-id" || events[1].Actor != "bob" {
		t.Errorf("second event %+v", events[1])
	}
	if st := r.Stats(); st.Recorded != 3 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}

	tests := []struct {
		name  string
		since time.Time
		want  int
	}{
		{"all", time.Time{}, 2},
		{"since the second", at.Add(500 * time.Millisecond), 1},
		{"after the last", time.Now().Add(time.Hour), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := List(ctx, js, tt.since)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want {
				t.Errorf("%d events, want %d", len(got), tt.want)
			}
		})
	}
}

func TestRecordWithoutNATS(t *testing.T) {
	s := natstest.Start(t)
	nc := natstest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureStream(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	r := NewRecorder(js, Options{Timeout: 200 * time.Millisecond})
	start := time.Now()
	err = r.Record(context.Background(), Event{Actor: "a", Action: ActionTokenRevoked, Target: "sub:x"})
	if !errors.Is(err, ErrNotRecorded) {
		t.Fatalf("err = %v, want ErrNotRecorded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Record took %v with NATS down, want about the 200ms timeout", d)
	}
	if st := r.Stats(); st.Failed != 1 || st.Recorded != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestListWithoutStream(t *testing.T) {
	events, err := List(context.Background(), startJS(t), time.Time{})
	if err != nil || len(events) != 0 {
		t.Fatalf("List = %v, %v; want nothing", events, err)
	}
}

func TestActor(t *testing.T) {
	if got := Actor(context.Background()); got != "unknown" {
		t.Errorf("Actor of a bare ctx = %q", got)
	}
	if got := Actor(WithActor(context.Background(), ActorSignal)); got != "signal" {
		t.Errorf("Actor = %q, want signal", got)
	}
}
