-- Raw usage events and the loader's watermarks.
--
-- Statements run in the database the loader is configured with (default
-- tollgate); names are unqualified so the same file works for any database.
-- A statement ends at a line ending in ';'. Every statement is idempotent
-- (IF NOT EXISTS), so a migration interrupted half way can simply run again.
-- Written for ClickHouse 18.16 and current releases alike: no DateTime64,
-- Map, Bool, LowCardinality or TTL.

-- usage_events holds every field of tollgate.usage.v1.UsageEvent, one row
-- per gateway request, plus where it came from (stream_seq) and when it was
-- loaded (ingested_at).
--
-- Deduplication: ReplacingMergeTree collapses rows with the same sorting key
-- within a partition. Copies of one event are byte-identical in every field
-- of the key (dept, ts, event_id) and in the partition key (the month of ts),
-- so they collapse; ordering by (dept, ts, ...) keeps per-department time
-- range queries reading only their own granules. Two rows with the same
-- event_id but a different dept or ts would not collapse, but such rows are
-- not copies of one event: the gateway never reuses an event id. Of a set
-- of copies the one loaded last (ingested_at) is kept.
--
-- Collapsing happens at merge time, so exact counts over raw rows read with
-- FINAL (or argMax(col, ingested_at) ... GROUP BY event_id). The loader
-- inserts each stream message once (see pkg/chstore), so FINAL only matters
-- after manual inserts or a replay that bypassed the loader.
CREATE TABLE IF NOT EXISTS usage_events
(
    event_id           String,
    request_id         String,
    ts                 DateTime('UTC'),
    ts_ms              UInt64,
    issuer             String,
    subject            String,
    key_id             String,
    dept               String,
    team               String,
    project            String,
    requested_model    String,
    served_model       String,
    provider           String,
    deployment         String,
    attempts           UInt32,
    fallbacks          Array(String),
    route              String,
    prompt_tokens      UInt64,
    completion_tokens  UInt64,
    cached_tokens      UInt64,
    reasoning_tokens   UInt64,
    estimated          UInt8,
    cost_nano_usd      Int64,
    pricing_version    String,
    endpoint           String,
    stream             UInt8,
    status_code        UInt32,
    error_type         String,
    client_aborted     UInt8,
    latency_total_us   UInt64,
    ttft_us            UInt64,
    upstream_us        UInt64,
    overhead_us        UInt64,
    cache_hit          UInt8,
    degradation_step   String,
    clamped_max_tokens UInt32,
    stream_seq         UInt64,
    ingested_at        DateTime('UTC')
)
ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(ts)
ORDER BY (dept, ts, event_id);

-- watermarks records, per stream and durable consumer, the highest stream
-- sequence whose events are all in usage_events. The loader appends a row
-- after each batch; read it with max(seq), which is exact whether or not
-- the rows have merged yet.
CREATE TABLE IF NOT EXISTS watermarks
(
    stream     String,
    consumer   String,
    seq        UInt64,
    updated_at DateTime('UTC')
)
ENGINE = ReplacingMergeTree(seq)
ORDER BY (stream, consumer);
