-- The sequenced envelope (issue #13): usage events travel in batches, each
-- numbered by its producer (a gateway instance). usage_events records the
-- batch a row came from: producer_id and batch_seq. Rows loaded from legacy
-- single-event messages, and rows loaded before this migration, read '' and
-- 0.
--
-- watermarks.windows holds, with each watermark, the loader's record of
-- the batches it applied (per producer, the Window of pkg/usage, encoded
-- by pkg/chstore): the state that lets the loader skip a batch republished
-- as a new stream message, however late. It is written in the same row as
-- the watermark, so both always describe the same point of the stream;
-- read it with argMax(windows, seq). Before this migration it reads ''
-- (no batch applied).
--
-- One column per statement: the migration runner skips an ADD COLUMN whose
-- column exists (18.16 has no ADD COLUMN IF NOT EXISTS).
ALTER TABLE usage_events ADD COLUMN producer_id String;
ALTER TABLE usage_events ADD COLUMN batch_seq UInt64;
ALTER TABLE watermarks ADD COLUMN windows String;
