-- The budget limits the gateways enforce, as configured (the config file's
-- budgets section that gateways and the budget service share), so that
-- dashboards compare spend with the real limits. The analytics service
-- writes them at start and on every config reload (SIGHUP); see
-- Store.WriteLimits in pkg/chstore. Limits signed into tokens are not here:
-- they belong to one token, not to the config.
--
-- One row per (scope, value, period) and write: scope is key, subject,
-- team, dept, project or global; value is the scope value, "*" for each
-- value separately, "" for global; team and project values name their
-- department ("research/ml", "*/ml"). amount_nano_usd is the limit in
-- nano-USD. version grows with every write (milliseconds since the epoch,
-- or one more than the largest stored); a write stores a row for every
-- configured limit and a row with removed = 1 for every stored limit the
-- config no longer has.
--
-- ReplacingMergeTree(version) keeps the newest row of a key once parts
-- merge; until then a key may have several rows, so read the current set
-- from the view budget_limits_current (argMax by version), never with
-- FINAL.
CREATE TABLE IF NOT EXISTS budget_limits
(
    scope           String,
    value           String,
    period          String,
    amount_nano_usd Int64,
    removed         UInt8,
    version         UInt64,
    updated_at      DateTime('UTC')
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (scope, value, period);

-- budget_limits_current is the current set of limits: the newest row of
-- each key, without the removed ones. amount_usd is amount_nano_usd / 1e9
-- as Float64, for display.
CREATE VIEW IF NOT EXISTS budget_limits_current AS
SELECT scope, value, period, amount AS amount_nano_usd, amount / 1e9 AS amount_usd,
    latest AS version, latest_at AS updated_at
FROM
(
    SELECT
        scope, value, period,
        argMax(amount_nano_usd, version) AS amount,
        argMax(removed, version) AS is_removed,
        max(version) AS latest,
        argMax(updated_at, version) AS latest_at
    FROM budget_limits
    GROUP BY scope, value, period
)
WHERE is_removed = 0;
