-- Re-priced copies of usage events, written by `tollctl replay --to
-- clickhouse --reprice FILE` (pkg/replay).
--
-- usage_events keeps what was charged; a re-pricing never rewrites it (its
-- rows collapse on (dept, ts, event_id), so a corrected row there would
-- replace the original, and the rollups would count the event twice).
-- Instead each re-pricing adds one row per event here, told apart by
-- pricing_version (the version of the price file used), next to the
-- original cost and version. Compare a version with what was charged:
--
--   SELECT dept, sum(cost_nano_usd) - sum(original_cost_nano_usd)
--   FROM usage_events_repriced FINAL WHERE pricing_version = '2026-12-01'
--   GROUP BY dept
--
-- Replaying the same range with the same file again adds nothing: the
-- replay skips events already stored for that version, and copies collapse
-- on (pricing_version, dept, ts, event_id) in any case (read with FINAL).
CREATE TABLE IF NOT EXISTS usage_events_repriced
(
    event_id                 String,
    request_id               String,
    ts                       DateTime('UTC'),
    dept                     String,
    team                     String,
    project                  String,
    subject                  String,
    key_id                   String,
    served_model             String,
    provider                 String,
    prompt_tokens            UInt64,
    completion_tokens        UInt64,
    cached_tokens            UInt64,
    cost_nano_usd            Int64,
    pricing_version          String,
    original_cost_nano_usd   Int64,
    original_pricing_version String,
    stream_seq               UInt64,
    repriced_at              DateTime('UTC')
)
ENGINE = ReplacingMergeTree(repriced_at)
PARTITION BY toYYYYMM(ts)
ORDER BY (pricing_version, dept, ts, event_id);
