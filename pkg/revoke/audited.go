package revoke

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/audit"
)

// recorder stores audit events; *audit.Recorder is one.
type recorder interface {
	Record(ctx context.Context, e audit.Event) error
}

// Revoker writes revocations and records each as an audit event, so
// `tollctl revoke` and POST /admin/revoke record the same thing.
type Revoker struct {
	kv    jetstream.KeyValue
	audit recorder
	now   func() time.Time
}

// NewRevoker returns a Revoker writing to kv (EnsureBucket's) and recording
// to rec. now defaults to time.Now.
func NewRevoker(kv jetstream.KeyValue, rec recorder, now func() time.Time) *Revoker {
	if now == nil {
		now = time.Now
	}
	return &Revoker{kv: kv, audit: rec, now: now}
}

// Target names a revocation in audit events: "jti:key-1", "sub:alice".
func Target(k Kind, value string) string { return string(k) + ":" + value }

// Revoke writes the revocation and records it for actor, with the entry it
// replaced (if any) as before. An error wrapping audit.ErrNotRecorded
// means the revocation is in force but its event is not stored.
func (r *Revoker) Revoke(ctx context.Context, actor string, k Kind, value, reason string) error {
	prev := r.entry(ctx, k, value)
	now := r.now()
	if err := Revoke(ctx, r.kv, k, value, reason, now); err != nil {
		return err
	}
	after, _ := json.Marshal(Entry{Kind: k, Value: value, Reason: reason, RevokedAtUnixNano: now.UnixNano()})
	sum := "revoked " + Target(k, value)
	if reason != "" {
		sum += ": " + reason
	}
	return r.audit.Record(ctx, audit.Event{Time: now, Actor: actor, Action: audit.ActionTokenRevoked,
		Target: Target(k, value), Before: prev, After: after, Summary: sum})
}

// Unrevoke removes the revocation and records it for actor, with the
// removed entry as before.
func (r *Revoker) Unrevoke(ctx context.Context, actor string, k Kind, value string) error {
	if k != KeyID && k != Subject {
		return fmt.Errorf("unrevoke: unknown kind %q (want jti or sub)", k)
	}
	prev := r.entry(ctx, k, value)
	if err := Unrevoke(ctx, r.kv, k, value); err != nil {
		return err
	}
	sum := "unrevoked " + Target(k, value)
	if prev == nil {
		sum += " (was not revoked)"
	}
	return r.audit.Record(ctx, audit.Event{Time: r.now(), Actor: actor, Action: audit.ActionTokenUnrevoked,
		Target: Target(k, value), Before: prev, Summary: sum})
}

// entry is the stored revocation of k and value, or nil.
func (r *Revoker) entry(ctx context.Context, k Kind, value string) json.RawMessage {
	e, err := r.kv.Get(ctx, key(k, value))
	if err != nil { // not revoked (ErrKeyNotFound), or unreadable: no before
		return nil
	}
	return json.RawMessage(e.Value())
}
