// Package chstore keeps Tollgate's usage analytics in ClickHouse: the schema
// (embedded, numbered migrations applied by Migrate) and the Loader, which
// copies usage events from the JetStream stream TOLLGATE_USAGE into the
// table usage_events, each event exactly once.
//
// The SQL runs on ClickHouse 18.16 (Debian's package, used by the tests) and
// on current releases, over the native protocol only. Its statements are
// in the catalogue pkg/chsql, which a test runs on 18.16 and 26.x. Money is Int64
// nano-USD; the spend views add a Decimal(18,9) USD column.
//
// # Schema
//
// migrations/0001_events.sql: usage_events (one row per request, every
// UsageEvent field, plus stream_seq and ingested_at; ReplacingMergeTree
// ordered by (dept, ts, event_id), partitioned by month) and watermarks.
// 0002_rollups.sql: usage_hourly and usage_daily (SummingMergeTree), kept
// by materialized views on usage_events. 0003_spend_views.sql: spend_hourly
// and spend_daily views in USD. 0008_batches.sql: the producer_id and
// batch_seq of each row (the batch that carried it; empty and 0 for legacy
// single-event messages) and watermarks.windows. 0010_cache_write_tier.sql:
// cache_write_tokens (prompt tokens written to the provider's prompt
// cache) and service_tier (flex, priority; empty for the standard tier),
// 0 and empty in rows loaded before it. 0011_daily_rollups.sql:
// usage_dept_daily (day, dept), usage_team_daily (day, dept, team,
// served_model) and usage_key_daily (day, dept, team, served_model,
// subject, key_id), SummingMergeTree tables kept by materialized views like
// the older rollups, whose rows grow with what is seen each day rather than
// with events; the dashboards read them. The migration fills each from the
// events already stored with one INSERT ... SELECT that runs only while
// the table is empty, then creates its view: running it again (or a run cut
// short) counts no event twice. A backfill cut short midway, and events
// inserted between the backfill and the view, would be missing (rebuild
// those months as deploy/clickhouse/README.md says), so the services
// migrate before they load (OpenWait), and an upgrade must not leave an
// older loader writing meanwhile. 0012_traffic_5m.sql: usage_traffic_5m, request, fallback and
// retry counts per 5 minutes, provider, model and error kind, for the
// traffic dashboard, kept and filled the same way. 0013_recovered.sql: usage_events.recovered (an event published from a
// killed gateway's begun record; docs/usage-recovery.md).
// 0014_panel_rollups.sql:
// narrower rollups for the dashboards at tens of millions of events
// (usage_dims, usage_dept_hourly, usage_subject_daily, usage_scope_daily,
// and the latency histograms usage_overhead_hourly and usage_ttft_hourly),
// kept and filled the same way. The files explain each
// choice; deploy/clickhouse/README.md tells operators how to use them.
//
// # Loading
//
// The Loader reads a durable pull consumer ("analytics"). A stream message
// is a batch of events from one producer (usage.DecodeMessage; a legacy
// message is a batch of one without a producer). The Loader collects
// messages (until they hold BatchSize events, or what arrived within
// BatchInterval of the first; a field scan counts each message's events),
// decodes them, inserts their events with one native batch insert, records the highest stream sequence
// in the watermarks table, and only then acknowledges them (the consumer's
// ack policy is AckAll, so one ack covers them). A fetch asks for as many
// messages as the events still wanted fill, at the events per message seen
// last, and for at most max(8 MiB, BatchSize KiB), so batched messages do
// not swell an insert when the guess is wrong. The next
// batch is collected (and decoded) while one is stored, so at most two are
// in memory; while ClickHouse is down the Loader retries the same
// batch with exponential backoff, marks the messages it holds in progress,
// and fetches nothing more. Nothing is lost: what is not acknowledged is
// delivered again.
//
// # Exactly once
//
// The materialized views count every row inserted, before
// ReplacingMergeTree deduplicates anything, so finance numbers are exact
// only if each event is inserted once. The Loader ensures that:
//
//   - Watermark: the watermark W means every event with a stream sequence
//     <= W is stored. Deliveries at or below W (redeliveries, replays) are
//     skipped. W only grows after the insert succeeded.
//   - In order, without holes: the consumer delivers in stream order and
//     the Loader checks that consumer (delivery) sequences are contiguous.
//     A missing delivery (lost on a reconnect, taken by another client)
//     could hide an event below the batch's top, so the Loader drops the
//     batches in hand unacknowledged and recreates the consumer at W+1
//     ("rewind"). It rewinds after its NATS connection reconnected too: a
//     restarted cluster may have lost its last messages (see below).
//     Stream sequences may still skip: those messages were deleted.
//   - At start, the consumer is reused only if it sits exactly at W with
//     nothing pending; otherwise it is recreated at W+1. A previous
//     process's unacknowledged messages are thus delivered at once and in
//     order, and an emptied ClickHouse is reloaded from the stream.
//   - Insert stored, watermark not (a crash in between), or an insert whose
//     outcome is unknown (a timeout, a dropped connection): the rows may be
//     stored while W was not advanced, and the messages come again. So at
//     start and after any failed insert the Loader first waits until the
//     server runs no insert of ours (an insert the client gave up on may
//     still be running: every insert carries a query id the Loader looks
//     for in system.processes), then looks up which of the batch's stream
//     sequences are stored (a query bounded by the batch's time range) and
//     inserts only the others. It keeps checking batches while it finds
//     stored rows; at most one batch can be stored without its watermark,
//     since the next insert starts only after the watermark write. The
//     writes go insert, then watermark, then ack: dying after the watermark
//     only causes redelivery, which W skips.
//   - Batches, however late: a producer numbers its batches, and the
//     stream holds a batch twice when it was republished after the
//     stream's duplicate window (a gateway's spool held it longer). The
//     Loader applies each (producer, seq) once with a usage.Dedup, one
//     usage.Window per producer: a batch already applied is skipped
//     (counted in republished_batches_total). The Dedup is stored in the
//     same watermarks row as the watermark (column windows), so the two
//     always describe the same point of the stream, and read back at start
//     and at every lease takeover; what the Loader applied in memory past
//     the stored watermark is dropped with the batches in hand. A crash
//     after an insert and before its watermark leaves batches stored that
//     the Dedup does not know: their messages come again at the same
//     stream sequences, and the lookup above finds their rows (by stream
//     sequence and event id), so they are recorded and not inserted twice.
//     The state grows with the number of producers only (a few dozen bytes
//     each once their batches are contiguous), never with time or events.
//     A batch arriving WindowSize seqs or more after one that never came
//     gives that one up (lost_batches_total); the producer's window
//     rules this out for a working gateway.
//   - Sequences reused below W: a recreated stream numbers its messages
//     from 1 again, and a cluster killed as a whole can lose its last
//     messages and give their sequences to the next ones. Before it
//     reuses or recreates the consumer, the Loader reads the message at W;
//     if it holds a batch the Dedup has not applied, W is lowered to just
//     under the lowest such message found walking down (checkHistory,
//     history_changes_total), and the batches met since are skipped by the
//     Dedup and the stored rows by the lookup above.
//   - Within a batch, a repeated delivery or event id is inserted once.
//   - One writer: Loaders of the same durable share a lease in a NATS KV
//     bucket. The holder loads; the others stand by and take over when it
//     stops (at once) or dies (after LeaseTTL). A holder starts a ClickHouse
//     write only while its lease has at least 2 × InsertTimeout to run, and
//     a new holder waits for running inserts before its first lookup.
//
// On a replicated cluster (Options.Cluster, cluster.go) an insert whose
// replica died may be stored only on that replica, out of the lookup's
// sight. There the Loader sends the same block again instead (ingested_at
// is stamped once per batch), into the Null table usage_ingest whose
// sibling views fill usage_events and each rollup, and every replicated
// table's block deduplication drops what it already holds; the rollups'
// load_seq column keeps two batches' blocks apart. The look-up of stored
// rows (at start) asks every replica, and waits for one that is down.
// docs/analytics.md,
// "Exactly once on a cluster".
//
// So duplicates are never inserted, and neither raw-row queries nor the
// rollups depend on FINAL or on merges for correctness. The exception is
// the legacy path: a legacy single-event message republished with a new
// stream sequence after the duplicate window (written by gateways from
// before batches) is a distinct message without a producer, and is loaded
// twice, as it always was. The check for running inserts sees one
// server: behind a load balancer or with several ClickHouse addresses, an
// insert abandoned on one server is not waited for on another.
//
// Undecodable events are logged, counted and acknowledged with their batch.
//
// # Audit events
//
// migrations/0007_audit_events.sql: audit_events, one row per operator
// change from the stream TOLLGATE_AUDIT (pkg/audit). The AuditLoader, on
// its own durable consumer (analytics-audit), inserts a batch and only
// then acknowledges it; before inserting it looks up the batch's ids and
// skips those already stored, so a redelivery is stored once.
//
// # Budget limits
//
// migrations/0009_budget_limits.sql: budget_limits, the config's budget
// limits (the ones the gateways enforce), and the view
// budget_limits_current, the newest row of each (scope, value, period)
// without the removed ones. Store.WriteLimits makes a set of limits the
// current one; the analytics service and gateway -embed call it through a
// LimitWriter (at start and on every reload), which writes from its own
// loop, only the newest set, retrying failed writes, so a reload never
// waits on ClickHouse. RunLoaders runs what both run: the usage loader, the
// audit loader and that writer. Dashboards read the view, never the table,
// so they need neither FINAL nor merges.
package chstore
