// Package audit records what operators change: token revocations, config
// reloads, budget limit changes and API keys. Each change is one Event,
// published as JSON to the JetStream stream TOLLGATE_AUDIT on the subject
// tollgate.audit.<action>, with the event id as Nats-Msg-Id so a retried
// publish is stored once. `tollctl audit` lists the stream; the analytics
// service copies it into ClickHouse (audit_events).
//
// An event never carries a secret: callers put redacted values in Before
// and After (pkg/admin's Redact and Diff for config).
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/usage"
)

// Stream is the JetStream stream of audit events.
const Stream = "TOLLGATE_AUDIT"

// SubjectPrefix starts every audit subject; the action follows it.
const SubjectPrefix = "tollgate.audit."

// Actions an Event records. They are also the last token of its subject.
const (
	ActionTokenRevoked   = "token.revoked"
	ActionTokenUnrevoked = "token.unrevoked"
	ActionConfigReloaded = "config.reloaded"
	ActionConfigRefused  = "config.reload_refused" // a valid file with keys that need a restart
	ActionBudgetChanged  = "budget.changed"
	ActionKeyCreated     = "key.created"
	ActionKeyRotated     = "key.rotated"
	ActionKeyRevoked     = "key.revoked"
)

// ActorSignal is the actor of a reload triggered by SIGHUP.
const ActorSignal = "signal"

// Event is one operator change.
type Event struct {
	// ID is unique and time-ordered (a UUIDv7); Record fills it when empty.
	// It is the message's Nats-Msg-Id.
	ID string `json:"id"`
	// Time is when the change was made; Record fills it when zero.
	Time time.Time `json:"time"`
	// Actor is who made it: an admin token's subject, the local operator's
	// user name (tollctl), "loopback" (an admin listener open without a
	// token) or "signal" (SIGHUP).
	Actor string `json:"actor"`
	// Action is one of the Action constants.
	Action string `json:"action"`
	// Target is what changed, such as "jti:key-1", "sub:alice" or the
	// config file's path.
	Target string `json:"target"`
	// Before and After are the target's state around the change, as JSON,
	// with secrets redacted; empty when there was none.
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
	// Summary is a one-line description, such as a reload's changed paths.
	Summary string `json:"summary,omitempty"`
}

// Subject returns the subject an event of action is published on.
func Subject(action string) string { return SubjectPrefix + action }

// ErrNotRecorded wraps every error of Record: the change was made but its
// event is not stored. Callers report it to whoever made the change.
var ErrNotRecorded = errors.New("audit event not recorded")

// streams creates the audit stream; jetstream.JetStream is one.
type streams interface {
	CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error)
}

// jetStream is what a Recorder calls: publish, and create the stream when
// it is missing.
type jetStream interface {
	streams
	Publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// EnsureStream creates the audit stream or updates its config. It keeps
// every event (no age or size limit: operator changes are few, and an
// audit trail that forgets is no trail) on file storage; duplicates are
// detected within the default two-minute window.
func EnsureStream(ctx context.Context, js streams, replicas int) error {
	if replicas <= 0 {
		replicas = 1
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        Stream,
		Description: "operator changes: revocations, reloads, budget limits, API keys",
		Subjects:    []string{SubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		Duplicates:  2 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("create stream %s: %w", Stream, err)
	}
	return nil
}

// Options configure a Recorder.
type Options struct {
	// Replicas of the stream when the Recorder creates it. Default 1.
	Replicas int
	// Timeout bounds one Record call, both publish attempts included, so a
	// NATS outage never holds an operator request for long. Default 2s.
	Timeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Recorder publishes audit events. It is safe for concurrent use.
type Recorder struct {
	js  jetStream
	o   Options
	rec atomic.Uint64 // events stored
	err atomic.Uint64 // events not stored
}

// NewRecorder returns a Recorder publishing with js.
func NewRecorder(js jetStream, o Options) *Recorder {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Recorder{js: js, o: o}
}

// Record fills e's ID and Time when empty and publishes it, waiting for the
// stream's acknowledgement for at most Options.Timeout. When the stream is
// missing it creates it and publishes again with the same message id, so a
// retry is stored once. An error wraps ErrNotRecorded and is counted in
// Stats().Failed.
func (r *Recorder) Record(ctx context.Context, e Event) error {
	if err := r.record(ctx, &e); err != nil {
		r.err.Add(1)
		return fmt.Errorf("%w: %s %s: %w", ErrNotRecorded, e.Action, e.Target, err)
	}
	r.rec.Add(1)
	return nil
}

func (r *Recorder) record(ctx context.Context, e *Event) error {
	if e.Action == "" {
		return errors.New("event has no action")
	}
	if e.Time.IsZero() {
		e.Time = r.o.Now()
	}
	e.Time = e.Time.UTC()
	if e.ID == "" {
		e.ID = usage.NewEventID(e.Time)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	_, err = r.js.Publish(ctx, Subject(e.Action), b, jetstream.WithMsgID(e.ID))
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		if err := EnsureStream(ctx, r.js, r.o.Replicas); err != nil {
			return err
		}
		_, err = r.js.Publish(ctx, Subject(e.Action), b, jetstream.WithMsgID(e.ID))
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", e.ID, err)
	}
	return nil
}

// Stats counts Record calls by outcome since the Recorder was made.
type Stats struct {
	Recorded uint64
	Failed   uint64
}

// Stats returns the counts, for a metrics CounterFunc.
func (r *Recorder) Stats() Stats {
	return Stats{Recorded: r.rec.Load(), Failed: r.err.Load()}
}

// Decode parses an event as published.
func Decode(data []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return Event{}, fmt.Errorf("decode audit event: %w", err)
	}
	if e.ID == "" || e.Action == "" {
		return Event{}, errors.New("decode audit event: no id or action")
	}
	return e, nil
}

// Actions of the web console's own events; its changes (keys) record the
// actions above with the console user's subject as actor.
const (
	ActionConsoleSignedIn  = "console.signed_in"
	ActionConsoleSignedOut = "console.signed_out"
)
