-- Rollups for the dashboard panels that were still over a second at ten
-- million events (docs/performance.md, Dashboards at scale):
--
--   usage_dims            (dept, team, served_model): every combination
--                         ever seen. The dashboards' team and model lists
--                         read it, and a panel tells from it whether a
--                         list holds every team or model of the selected
--                         departments (Grafana's All), so that it can read
--                         a rollup without those columns.
--   usage_dept_hourly     (hour, dept): spend and tokens over time when
--                         every team and model is selected.
--   usage_subject_daily   (day, dept, team, subject, key_id): top subjects
--                         and keys when every model is selected. A key
--                         belongs to one team, so it has about one row per
--                         subject and day.
--   usage_scope_daily     (scope, day, value, name): spend per budget
--                         scope and value (global, dept, team, project,
--                         subject, key; team and project qualified by
--                         their department as budgets spell them) and day,
--                         for the budget forecast. requests keeps a
--                         day with spend 0 from vanishing when rows merge.
--   usage_overhead_hourly (hour, provider, served_model, overhead_bucket_us)
--   usage_ttft_hourly     (hour, provider, served_model, ttft_bucket_us):
--                         latency histograms, requests per bucket (in_bucket), for the
--                         latency quantile panels (streams with a time to
--                         first token only, for the second).
--
-- The latency buckets keep two significant digits of the microseconds
-- (123456 -> 120000; below 100 the value itself): a quantile read from
-- them (quantileExactWeighted) is a bucket's lower bound, at most 10%
-- under the exact value, and equals the same quantile over the events with
-- their latencies so rounded.
--
-- Kept by materialized views and backfilled once while empty, before the
-- view exists, like the daily rollups (0011_daily_rollups.sql, whose notes
-- apply).

CREATE TABLE IF NOT EXISTS usage_dims
(
    dept         String,
    team         String,
    served_model String,
    requests     UInt64
)
ENGINE = SummingMergeTree(requests)
ORDER BY (dept, team, served_model);

INSERT INTO usage_dims (dept, team, served_model, requests)
SELECT dept, team, served_model, toUInt64(count()) AS requests
FROM usage_events
WHERE (SELECT count() FROM usage_dims) = 0
GROUP BY dept, team, served_model;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_dims_mv TO usage_dims AS
SELECT dept, team, served_model, toUInt64(count()) AS requests
FROM usage_events
GROUP BY dept, team, served_model;

CREATE TABLE IF NOT EXISTS usage_dept_hourly
(
    hour              DateTime('UTC'),
    dept              String,
    requests          UInt64,
    prompt_tokens     UInt64,
    completion_tokens UInt64,
    cost_nano_usd     Int64
)
ENGINE = SummingMergeTree((requests, prompt_tokens, completion_tokens, cost_nano_usd))
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, dept);

INSERT INTO usage_dept_hourly (hour, dept, requests, prompt_tokens, completion_tokens, cost_nano_usd)
SELECT toStartOfHour(ts) AS hour, dept, toUInt64(count()) AS requests,
    sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
WHERE (SELECT count() FROM usage_dept_hourly) = 0
GROUP BY hour, dept;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_dept_hourly_mv TO usage_dept_hourly AS
SELECT toStartOfHour(ts) AS hour, dept, toUInt64(count()) AS requests,
    sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
GROUP BY hour, dept;

CREATE TABLE IF NOT EXISTS usage_subject_daily
(
    day           Date,
    dept          String,
    team          String,
    subject       String,
    key_id        String,
    requests      UInt64,
    cost_nano_usd Int64
)
ENGINE = SummingMergeTree((requests, cost_nano_usd))
PARTITION BY toYYYYMM(day)
ORDER BY (day, dept, team, subject, key_id);

INSERT INTO usage_subject_daily (day, dept, team, subject, key_id, requests, cost_nano_usd)
SELECT toDate(ts) AS day, dept, team, subject, key_id,
    toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
WHERE (SELECT count() FROM usage_subject_daily) = 0
GROUP BY day, dept, team, subject, key_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_subject_daily_mv TO usage_subject_daily AS
SELECT toDate(ts) AS day, dept, team, subject, key_id,
    toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
GROUP BY day, dept, team, subject, key_id;

CREATE TABLE IF NOT EXISTS usage_scope_daily
(
    scope         String,
    day           Date,
    value         String,
    name          String,
    requests      UInt64,
    cost_nano_usd Int64
)
ENGINE = SummingMergeTree((requests, cost_nano_usd))
PARTITION BY toYYYYMM(day)
ORDER BY (scope, day, value, name);

INSERT INTO usage_scope_daily (scope, day, value, name, requests, cost_nano_usd)
SELECT s.1 AS scope, toDate(ts) AS day, s.2 AS value, s.3 AS name,
    toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
ARRAY JOIN arrayFilter(x -> x.1 = 'global' OR x.4 != '', [
    ('global', '', '', ''),
    ('dept', dept, '', dept),
    ('team', concat(replaceAll(replaceAll(replaceAll(dept, '%', '%25'), '/', '%2F'), '*', '%2A'), '/', team), team, team),
    ('project', concat(replaceAll(replaceAll(replaceAll(dept, '%', '%25'), '/', '%2F'), '*', '%2A'), '/', project), project, project),
    ('subject', subject, '', subject),
    ('key', key_id, '', key_id)]) AS s
WHERE (SELECT count() FROM usage_scope_daily) = 0
GROUP BY scope, day, value, name;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_scope_daily_mv TO usage_scope_daily AS
SELECT s.1 AS scope, toDate(ts) AS day, s.2 AS value, s.3 AS name,
    toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
ARRAY JOIN arrayFilter(x -> x.1 = 'global' OR x.4 != '', [
    ('global', '', '', ''),
    ('dept', dept, '', dept),
    ('team', concat(replaceAll(replaceAll(replaceAll(dept, '%', '%25'), '/', '%2F'), '*', '%2A'), '/', team), team, team),
    ('project', concat(replaceAll(replaceAll(replaceAll(dept, '%', '%25'), '/', '%2F'), '*', '%2A'), '/', project), project, project),
    ('subject', subject, '', subject),
    ('key', key_id, '', key_id)]) AS s
GROUP BY scope, day, value, name;

CREATE TABLE IF NOT EXISTS usage_overhead_hourly
(
    hour               DateTime('UTC'),
    provider           String,
    served_model       String,
    overhead_bucket_us UInt64,
    in_bucket          UInt64
)
ENGINE = SummingMergeTree(in_bucket)
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, provider, served_model, overhead_bucket_us);

INSERT INTO usage_overhead_hourly (hour, provider, served_model, overhead_bucket_us, in_bucket)
SELECT toStartOfHour(ts) AS hour, provider, served_model,
    multiIf(overhead_us < 100, overhead_us, overhead_us < 1000, intDiv(overhead_us, 10) * 10,
        overhead_us < 10000, intDiv(overhead_us, 100) * 100, overhead_us < 100000, intDiv(overhead_us, 1000) * 1000,
        overhead_us < 1000000, intDiv(overhead_us, 10000) * 10000, overhead_us < 10000000, intDiv(overhead_us, 100000) * 100000,
        overhead_us < 100000000, intDiv(overhead_us, 1000000) * 1000000, intDiv(overhead_us, 10000000) * 10000000) AS overhead_bucket_us,
    toUInt64(count()) AS in_bucket
FROM usage_events
WHERE (SELECT count() FROM usage_overhead_hourly) = 0
GROUP BY hour, provider, served_model, overhead_bucket_us;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_overhead_hourly_mv TO usage_overhead_hourly AS
SELECT toStartOfHour(ts) AS hour, provider, served_model,
    multiIf(overhead_us < 100, overhead_us, overhead_us < 1000, intDiv(overhead_us, 10) * 10,
        overhead_us < 10000, intDiv(overhead_us, 100) * 100, overhead_us < 100000, intDiv(overhead_us, 1000) * 1000,
        overhead_us < 1000000, intDiv(overhead_us, 10000) * 10000, overhead_us < 10000000, intDiv(overhead_us, 100000) * 100000,
        overhead_us < 100000000, intDiv(overhead_us, 1000000) * 1000000, intDiv(overhead_us, 10000000) * 10000000) AS overhead_bucket_us,
    toUInt64(count()) AS in_bucket
FROM usage_events
GROUP BY hour, provider, served_model, overhead_bucket_us;

CREATE TABLE IF NOT EXISTS usage_ttft_hourly
(
    hour           DateTime('UTC'),
    provider       String,
    served_model   String,
    ttft_bucket_us UInt64,
    in_bucket      UInt64
)
ENGINE = SummingMergeTree(in_bucket)
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, provider, served_model, ttft_bucket_us);

INSERT INTO usage_ttft_hourly (hour, provider, served_model, ttft_bucket_us, in_bucket)
SELECT toStartOfHour(ts) AS hour, provider, served_model,
    multiIf(ttft_us < 100, ttft_us, ttft_us < 1000, intDiv(ttft_us, 10) * 10,
        ttft_us < 10000, intDiv(ttft_us, 100) * 100, ttft_us < 100000, intDiv(ttft_us, 1000) * 1000,
        ttft_us < 1000000, intDiv(ttft_us, 10000) * 10000, ttft_us < 10000000, intDiv(ttft_us, 100000) * 100000,
        ttft_us < 100000000, intDiv(ttft_us, 1000000) * 1000000, intDiv(ttft_us, 10000000) * 10000000) AS ttft_bucket_us,
    toUInt64(count()) AS in_bucket
FROM usage_events
WHERE (SELECT count() FROM usage_ttft_hourly) = 0 AND stream = 1 AND ttft_us > 0
GROUP BY hour, provider, served_model, ttft_bucket_us;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_ttft_hourly_mv TO usage_ttft_hourly AS
SELECT toStartOfHour(ts) AS hour, provider, served_model,
    multiIf(ttft_us < 100, ttft_us, ttft_us < 1000, intDiv(ttft_us, 10) * 10,
        ttft_us < 10000, intDiv(ttft_us, 100) * 100, ttft_us < 100000, intDiv(ttft_us, 1000) * 1000,
        ttft_us < 1000000, intDiv(ttft_us, 10000) * 10000, ttft_us < 10000000, intDiv(ttft_us, 100000) * 100000,
        ttft_us < 100000000, intDiv(ttft_us, 1000000) * 1000000, intDiv(ttft_us, 10000000) * 10000000) AS ttft_bucket_us,
    toUInt64(count()) AS in_bucket
FROM usage_events
WHERE stream = 1 AND ttft_us > 0
GROUP BY hour, provider, served_model, ttft_bucket_us;
