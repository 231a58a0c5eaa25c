-- Operator changes (pkg/audit's Event) from the stream TOLLGATE_AUDIT, one
-- row per event, loaded by the AuditLoader. Few rows: no rollups.
--
-- ts keeps whole seconds (DateTime64 fails on 18.16), ts_ms the
-- milliseconds since the epoch. before and after are the event's JSON
-- (secrets already redacted by the producer), as String: read fields with
-- visitParamExtractString. ReplacingMergeTree ordered by id keeps one row
-- per event id even if a row is inserted twice; the loader also skips ids
-- already stored, so count() is exact without FINAL.
CREATE TABLE IF NOT EXISTS audit_events (
    id String,
    ts DateTime('UTC'),
    ts_ms UInt64,
    actor String,
    action String,
    target String,
    before String,
    after String,
    summary String,
    stream_seq UInt64,
    ingested_at DateTime('UTC')
) ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(ts)
ORDER BY id;
