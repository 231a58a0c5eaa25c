-- Hourly and daily rollups of usage_events, kept by materialized views.
--
-- Each rollup row sums the events of one (period, dept, team, project,
-- provider, served_model, requested_model). SummingMergeTree adds rows with
-- the same key together when parts merge, so always read with sum(...)
-- GROUP BY: a key may still have several rows.
--
-- Periods are UTC (the columns are DateTime('UTC') / Date of a UTC time),
-- like the budget periods.
--
-- errors counts events with status_code >= 400 or an error_type (a stream
-- that failed after its 200 header). latency_total_us and ttft_us are sums:
-- divide by requests for a mean.
--
-- A materialized view sees each inserted block as it is inserted, before any
-- deduplication of usage_events, so an event inserted twice would be counted
-- twice here. The loader guarantees every stream message is inserted at most
-- once (watermark, in-batch event_id dedupe, and a check of what is already
-- stored after any insert whose outcome is unknown); see pkg/chstore. Rows
-- inserted before these views existed are not in the rollups.

CREATE TABLE IF NOT EXISTS usage_hourly
(
    hour              DateTime('UTC'),
    dept              String,
    team              String,
    project           String,
    provider          String,
    served_model      String,
    requested_model   String,
    requests          UInt64,
    errors            UInt64,
    estimated         UInt64,
    cache_hits        UInt64,
    prompt_tokens     UInt64,
    completion_tokens UInt64,
    cached_tokens     UInt64,
    reasoning_tokens  UInt64,
    cost_nano_usd     Int64,
    latency_total_us  UInt64,
    ttft_us           UInt64
)
ENGINE = SummingMergeTree((requests, errors, estimated, cache_hits, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost_nano_usd, latency_total_us, ttft_us))
PARTITION BY toYYYYMM(hour)
ORDER BY (dept, hour, team, project, provider, served_model, requested_model);

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_hourly_mv TO usage_hourly AS
SELECT
    toStartOfHour(ts) AS hour,
    dept,
    team,
    project,
    provider,
    served_model,
    requested_model,
    toUInt64(count()) AS requests,
    toUInt64(countIf(status_code >= 400 OR error_type != '')) AS errors,
    toUInt64(sum(estimated)) AS estimated,
    toUInt64(sum(cache_hit)) AS cache_hits,
    sum(prompt_tokens) AS prompt_tokens,
    sum(completion_tokens) AS completion_tokens,
    sum(cached_tokens) AS cached_tokens,
    sum(reasoning_tokens) AS reasoning_tokens,
    sum(cost_nano_usd) AS cost_nano_usd,
    sum(latency_total_us) AS latency_total_us,
    sum(ttft_us) AS ttft_us
FROM usage_events
GROUP BY hour, dept, team, project, provider, served_model, requested_model;

CREATE TABLE IF NOT EXISTS usage_daily
(
    day               Date,
    dept              String,
    team              String,
    project           String,
    provider          String,
    served_model      String,
    requested_model   String,
    requests          UInt64,
    errors            UInt64,
    estimated         UInt64,
    cache_hits        UInt64,
    prompt_tokens     UInt64,
    completion_tokens UInt64,
    cached_tokens     UInt64,
    reasoning_tokens  UInt64,
    cost_nano_usd     Int64,
    latency_total_us  UInt64,
    ttft_us           UInt64
)
ENGINE = SummingMergeTree((requests, errors, estimated, cache_hits, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost_nano_usd, latency_total_us, ttft_us))
PARTITION BY toYYYYMM(day)
ORDER BY (dept, day, team, project, provider, served_model, requested_model);

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_daily_mv TO usage_daily AS
SELECT
    toDate(ts) AS day,
    dept,
    team,
    project,
    provider,
    served_model,
    requested_model,
    toUInt64(count()) AS requests,
    toUInt64(countIf(status_code >= 400 OR error_type != '')) AS errors,
    toUInt64(sum(estimated)) AS estimated,
    toUInt64(sum(cache_hit)) AS cache_hits,
    sum(prompt_tokens) AS prompt_tokens,
    sum(completion_tokens) AS completion_tokens,
    sum(cached_tokens) AS cached_tokens,
    sum(reasoning_tokens) AS reasoning_tokens,
    sum(cost_nano_usd) AS cost_nano_usd,
    sum(latency_total_us) AS latency_total_us,
    sum(ttft_us) AS ttft_us
FROM usage_events
GROUP BY day, dept, team, project, provider, served_model, requested_model;
