-- The budgets each request was checked against at admission
-- (UsageEvent.budgets, tollgate.usage.v1.BudgetCheck), as parallel arrays:
-- element i of every budget_* column describes the same limit. Rows loaded
-- before this migration have empty arrays. `tollctl explain` and
-- GET /admin/usage/{request_id} read them; for example, the tightest
-- headroom per request:
--
--   SELECT request_id, arrayReduce('min', budget_headroom_nano_usd)
--   FROM usage_events WHERE notEmpty(budget_scope)
--
-- Parallel arrays rather than Nested: the same DDL runs on ClickHouse 18.16
-- and current releases (where Nested columns may be stored unflattened).
-- 18.16 has no ADD COLUMN IF NOT EXISTS: the migration runner skips an
-- ADD COLUMN whose column exists (system.columns), so each statement adds
-- one column.
ALTER TABLE usage_events ADD COLUMN budget_scope Array(String);
ALTER TABLE usage_events ADD COLUMN budget_value Array(String);
ALTER TABLE usage_events ADD COLUMN budget_period Array(String);
ALTER TABLE usage_events ADD COLUMN budget_period_start Array(String);
ALTER TABLE usage_events ADD COLUMN budget_from_token Array(UInt8);
ALTER TABLE usage_events ADD COLUMN budget_limit_nano_usd Array(Int64);
ALTER TABLE usage_events ADD COLUMN budget_spent_nano_usd Array(Int64);
ALTER TABLE usage_events ADD COLUMN budget_reserved_nano_usd Array(Int64);
ALTER TABLE usage_events ADD COLUMN budget_headroom_nano_usd Array(Int64);
