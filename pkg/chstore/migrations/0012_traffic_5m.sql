-- Request counts per 5 minutes, provider and model, for the gateway
-- traffic dashboard: its rows grow with providers, models and error kinds
-- seen, not with events.
--
-- error is what the "Errors by type" panel shows for a failed request (the
-- error_type, or http_<status> for a status >= 400 without one), '' for a
-- success. fell_back and retried count requests that went to a fallback
-- deployment and requests tried more than once. Latency quantiles are not
-- here: they need every value (the panels read usage_events).
--
-- Kept by a materialized view and backfilled once while empty, before the
-- view exists, like the daily rollups (0011_daily_rollups.sql, whose notes
-- apply).

CREATE TABLE IF NOT EXISTS usage_traffic_5m
(
    bucket       DateTime('UTC'),
    provider     String,
    served_model String,
    error        String,
    requests     UInt64,
    fell_back    UInt64,
    retried      UInt64
)
ENGINE = SummingMergeTree((requests, fell_back, retried))
PARTITION BY toYYYYMM(bucket)
ORDER BY (bucket, provider, served_model, error);

INSERT INTO usage_traffic_5m (bucket, provider, served_model, error, requests, fell_back, retried)
SELECT toStartOfFiveMinute(ts) AS bucket, provider, served_model,
    if(status_code >= 400 OR error_type != '', if(error_type != '', error_type, concat('http_', toString(status_code))), '') AS error,
    toUInt64(count()) AS requests,
    toUInt64(countIf(length(fallbacks) > 0)) AS fell_back,
    toUInt64(countIf(attempts > 1)) AS retried
FROM usage_events
WHERE (SELECT count() FROM usage_traffic_5m) = 0
GROUP BY bucket, provider, served_model, error;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_traffic_5m_mv TO usage_traffic_5m AS
SELECT toStartOfFiveMinute(ts) AS bucket, provider, served_model,
    if(status_code >= 400 OR error_type != '', if(error_type != '', error_type, concat('http_', toString(status_code))), '') AS error,
    toUInt64(count()) AS requests,
    toUInt64(countIf(length(fallbacks) > 0)) AS fell_back,
    toUInt64(countIf(attempts > 1)) AS retried
FROM usage_events
GROUP BY bucket, provider, served_model, error;
