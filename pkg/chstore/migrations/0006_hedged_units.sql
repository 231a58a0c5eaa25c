-- UsageEvent.hedged (a second call raced the first; see README "Hedged
-- requests") and UsageEvent.units / unit (what a per-unit price counted on
-- the pass-through endpoints: images, audio seconds, characters). Rows
-- loaded before this migration read 0 and ''. One column per statement: the
-- migration runner skips an ADD COLUMN whose column exists (18.16 has no
-- ADD COLUMN IF NOT EXISTS).
ALTER TABLE usage_events ADD COLUMN hedged UInt8;
ALTER TABLE usage_events ADD COLUMN units UInt64;
ALTER TABLE usage_events ADD COLUMN unit String;
