-- UsageEvent.recovered: 1 for an event published from the begun record of
-- a request whose gateway ended (killed, crashed) before recording it,
-- billed by the recovery rule (docs/usage-recovery.md; estimated is 1
-- too). Rows loaded before this migration read 0.
ALTER TABLE usage_events ADD COLUMN recovered UInt8;
