-- Daily rollups narrow enough for the dashboards at tens of millions of
-- events: their rows grow with the number of departments, teams, models,
-- subjects and keys seen each day, not with the number of events.
--
--   usage_dept_daily  (day, dept): the global and department budgets.
--   usage_team_daily  (day, dept, team, served_model): team budgets, and
--                     panels filtered by department, team and model.
--   usage_key_daily   (day, dept, team, served_model, subject, key_id):
--                     top subjects, top keys, subject and key budgets.
--
-- Like usage_hourly and usage_daily (0002_rollups.sql) they are
-- SummingMergeTree tables kept by materialized views on usage_events, so
-- they rely on the same invariant: the loader inserts every event once.
-- Read them with sum(...) GROUP BY: a key may still have several rows.
--
-- Backfill: each table is filled from the events already stored by one
-- INSERT ... SELECT that runs only while the table is empty, and its view
-- is created after it. A migration run again, or cut short and run
-- again, therefore never counts an event twice. What it can miss: the
-- rest of a backfill cut short midway (the table is no longer empty), and
-- events a loader inserts between the backfill and the view's creation.
-- The services apply migrations before they start loading
-- (chstore.OpenWait), so run the upgrade with no older loader still
-- writing; deploy/clickhouse/README.md (Reloading) tells how to rebuild a
-- rollup's months from usage_events.

CREATE TABLE IF NOT EXISTS usage_dept_daily
(
    day           Date,
    dept          String,
    requests      UInt64,
    cost_nano_usd Int64
)
ENGINE = SummingMergeTree((requests, cost_nano_usd))
PARTITION BY toYYYYMM(day)
ORDER BY (day, dept);

INSERT INTO usage_dept_daily (day, dept, requests, cost_nano_usd)
SELECT toDate(ts) AS day, dept, toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
WHERE (SELECT count() FROM usage_dept_daily) = 0
GROUP BY day, dept;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_dept_daily_mv TO usage_dept_daily AS
SELECT toDate(ts) AS day, dept, toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
GROUP BY day, dept;

CREATE TABLE IF NOT EXISTS usage_team_daily
(
    day               Date,
    dept              String,
    team              String,
    served_model      String,
    requests          UInt64,
    errors            UInt64,
    prompt_tokens     UInt64,
    completion_tokens UInt64,
    cost_nano_usd     Int64
)
ENGINE = SummingMergeTree((requests, errors, prompt_tokens, completion_tokens, cost_nano_usd))
PARTITION BY toYYYYMM(day)
ORDER BY (day, dept, team, served_model);

INSERT INTO usage_team_daily (day, dept, team, served_model, requests, errors, prompt_tokens, completion_tokens, cost_nano_usd)
SELECT toDate(ts) AS day, dept, team, served_model,
    toUInt64(count()) AS requests,
    toUInt64(countIf(status_code >= 400 OR error_type != '')) AS errors,
    sum(prompt_tokens) AS prompt_tokens,
    sum(completion_tokens) AS completion_tokens,
    sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
WHERE (SELECT count() FROM usage_team_daily) = 0
GROUP BY day, dept, team, served_model;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_team_daily_mv TO usage_team_daily AS
SELECT toDate(ts) AS day, dept, team, served_model,
    toUInt64(count()) AS requests,
    toUInt64(countIf(status_code >= 400 OR error_type != '')) AS errors,
    sum(prompt_tokens) AS prompt_tokens,
    sum(completion_tokens) AS completion_tokens,
    sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
GROUP BY day, dept, team, served_model;

CREATE TABLE IF NOT EXISTS usage_key_daily
(
    day           Date,
    dept          String,
    team          String,
    served_model  String,
    subject       String,
    key_id        String,
    requests      UInt64,
    cost_nano_usd Int64
)
ENGINE = SummingMergeTree((requests, cost_nano_usd))
PARTITION BY toYYYYMM(day)
ORDER BY (day, dept, team, served_model, subject, key_id);

INSERT INTO usage_key_daily (day, dept, team, served_model, subject, key_id, requests, cost_nano_usd)
SELECT toDate(ts) AS day, dept, team, served_model, subject, key_id,
    toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
WHERE (SELECT count() FROM usage_key_daily) = 0
GROUP BY day, dept, team, served_model, subject, key_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_key_daily_mv TO usage_key_daily AS
SELECT toDate(ts) AS day, dept, team, served_model, subject, key_id,
    toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
GROUP BY day, dept, team, served_model, subject, key_id;
