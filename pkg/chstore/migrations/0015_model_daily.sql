-- usage_model_daily (day, dept, served_model): the console overview's top
-- models, of every department or of one. usage_team_daily answered it by
-- reading a row per team as well (1.8 million rows for a month at ten
-- million events); this table holds a row per department and model a day.
--
-- Like the other rollups it is a SummingMergeTree kept by a materialized
-- view on usage_events, filled once from the events already stored while
-- it is empty (0011_daily_rollups.sql says why that order is safe). Read
-- it with sum(...) GROUP BY.

CREATE TABLE IF NOT EXISTS usage_model_daily
(
    day           Date,
    dept          String,
    served_model  String,
    requests      UInt64,
    cost_nano_usd Int64
)
ENGINE = SummingMergeTree((requests, cost_nano_usd))
PARTITION BY toYYYYMM(day)
ORDER BY (day, dept, served_model);

INSERT INTO usage_model_daily (day, dept, served_model, requests, cost_nano_usd)
SELECT toDate(ts) AS day, dept, served_model,
    toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
WHERE (SELECT count() FROM usage_model_daily) = 0
GROUP BY day, dept, served_model;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_model_daily_mv TO usage_model_daily AS
SELECT toDate(ts) AS day, dept, served_model,
    toUInt64(count()) AS requests, sum(cost_nano_usd) AS cost_nano_usd
FROM usage_events
GROUP BY day, dept, served_model;
