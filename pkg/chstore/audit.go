package chstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/chsql"
)

// AuditDurable is the AuditLoader's durable consumer on audit.Stream.
const AuditDurable = "analytics-audit"

// auditStreams is what the AuditLoader calls on JetStream;
// jetstream.JetStream is one.
type auditStreams interface {
	CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error)
	CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error)
}

// AuditLoader copies audit events from audit.Stream into audit_events. It
// fetches a batch, looks up which of its ids are stored, inserts the
// others, and only then acknowledges the batch; a failed insert leaves the
// batch unacknowledged (NakWithDelay), so it is delivered again and the
// lookup keeps a redelivered event from being inserted twice. Undecodable
// messages are terminated. Operator changes are few: a batch is at most
// 100 events and one loader is enough.
type AuditLoader struct {
	store    *Store
	js       auditStreams
	log      *slog.Logger
	wait     time.Duration
	replicas int // the audit stream's (EnsureStream)
}

// NewAuditLoader returns an AuditLoader; replicas is the audit stream's
// replica count (the config's nats.replicas: the stream is created or
// updated to it, so it must match what the gateways ask for); maxWait
// bounds how long a fetch waits for events (default 1s). log defaults to
// discard.
func NewAuditLoader(store *Store, js auditStreams, replicas int, maxWait time.Duration, log *slog.Logger) *AuditLoader {
	if maxWait <= 0 {
		maxWait = time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &AuditLoader{store: store, js: js, log: log, wait: maxWait, replicas: replicas}
}

// Run loads until ctx ends, then returns nil.
func (l *AuditLoader) Run(ctx context.Context) error {
	if err := audit.EnsureStream(ctx, l.js, l.replicas); err != nil {
		return ignoreCancel(err)
	}
	c, err := l.js.CreateOrUpdateConsumer(ctx, audit.Stream, jetstream.ConsumerConfig{
		Durable: AuditDurable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 200,
	})
	if err != nil {
		return ignoreCancel(fmt.Errorf("create consumer %s: %w", AuditDurable, err))
	}
	for ctx.Err() == nil {
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(l.wait))
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("fetch audit events", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if len(msgs) == 0 {
			continue
		}
		if err := l.Load(ctx, msgs); err != nil {
			l.log.Warn("load audit events; they come again", "events", len(msgs), "err", err)
			for _, m := range msgs {
				_ = m.NakWithDelay(2 * time.Second)
			}
		}
	}
	return nil
}

// Load stores msgs (audit events as published) and acknowledges them; on
// error nothing is acknowledged.
func (l *AuditLoader) Load(ctx context.Context, msgs []jetstream.Msg) error {
	type row struct {
		e   audit.Event
		seq uint64
	}
	var rows []row
	var ids []any
	seen := map[string]bool{}
	var done []jetstream.Msg
	for _, m := range msgs {
		e, err := audit.Decode(m.Data())
		md, merr := m.Metadata()
		if err != nil || merr != nil {
			l.log.Warn("undecodable audit event dropped", "subject", m.Subject(), "err", errors.Join(err, merr))
			_ = m.Term()
			continue
		}
		done = append(done, m)
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		rows = append(rows, row{e, md.Sequence.Stream})
		ids = append(ids, e.ID)
	}
	if len(rows) > 0 {
		stored, err := l.storedIDs(ctx, ids)
		if err != nil {
			return err
		}
		b, err := l.store.conn.PrepareBatch(ctx, chsql.InsertAudit.SQL)
		if err != nil {
			return fmt.Errorf("insert audit events: %w", err)
		}
		n, now := 0, time.Now().UTC()
		for _, r := range rows {
			if stored[r.e.ID] {
				continue
			}
			n++
			e := r.e
			if err := b.Append(e.ID, e.Time.UTC(), uint64(e.Time.UnixMilli()), e.Actor, e.Action, e.Target,
				string(e.Before), string(e.After), e.Summary, r.seq, now); err != nil {
				_ = b.Abort()
				return fmt.Errorf("insert audit events: %w", err)
			}
		}
		if n == 0 {
			_ = b.Abort()
		} else if err := b.Send(); err != nil {
			return fmt.Errorf("insert audit events: %w", err)
		}
	}
	for _, m := range done {
		if err := m.Ack(); err != nil {
			return fmt.Errorf("ack audit event: %w", err)
		}
	}
	return nil
}

// storedIDs returns which of ids audit_events holds.
func (l *AuditLoader) storedIDs(ctx context.Context, ids []any) (map[string]bool, error) {
	rows, err := l.store.conn.Query(ctx, chsql.StoredAuditIDs.SQL, clickhouse.GroupSet{Value: ids})
	if err != nil {
		return nil, fmt.Errorf("look up audit events: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("look up audit events: %w", err)
		}
		out[id] = true
	}
	return out, rows.Err()
}
