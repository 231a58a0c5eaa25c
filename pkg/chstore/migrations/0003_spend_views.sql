-- Spend per day and per hour in USD, for dashboards.
--
-- cost_nano_usd stays the exact integer; cost_usd is the same amount as
-- Decimal(18,9), built from the integer's whole and fractional parts so no
-- float is ever involved (toDecimal64(x, 9) of the whole integer would
-- overflow past 9.2 USD). The views sum the rollups' unmerged rows, so they
-- are exact at any time.

CREATE VIEW IF NOT EXISTS spend_daily AS
SELECT
    day, dept, team, project, provider, served_model,
    requests, errors, prompt_tokens, completion_tokens, cost_nano,
    toDecimal64(intDiv(cost_nano, 1000000000), 9) + toDecimal64(cost_nano % 1000000000, 9) / 1000000000 AS cost_usd
FROM
(
    SELECT
        day, dept, team, project, provider, served_model,
        sum(requests) AS requests,
        sum(errors) AS errors,
        sum(prompt_tokens) AS prompt_tokens,
        sum(completion_tokens) AS completion_tokens,
        sum(cost_nano_usd) AS cost_nano
    FROM usage_daily
    GROUP BY day, dept, team, project, provider, served_model
);

CREATE VIEW IF NOT EXISTS spend_hourly AS
SELECT
    hour, dept, team, project, provider, served_model,
    requests, errors, prompt_tokens, completion_tokens, cost_nano,
    toDecimal64(intDiv(cost_nano, 1000000000), 9) + toDecimal64(cost_nano % 1000000000, 9) / 1000000000 AS cost_usd
FROM
(
    SELECT
        hour, dept, team, project, provider, served_model,
        sum(requests) AS requests,
        sum(errors) AS errors,
        sum(prompt_tokens) AS prompt_tokens,
        sum(completion_tokens) AS completion_tokens,
        sum(cost_nano_usd) AS cost_nano
    FROM usage_hourly
    GROUP BY hour, dept, team, project, provider, served_model
);
