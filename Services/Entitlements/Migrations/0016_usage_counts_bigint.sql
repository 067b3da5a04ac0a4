-- A counter with no cap (a paid tier's) grows without bound: as a 32-bit integer its count ran out
-- at 2^31 - 1, and every acquisition after that answered 500. The previous build reads the count
-- as an integer of any width. Rewrites the table (a row per user and counter) under its lock.
ALTER TABLE usage_counters ALTER COLUMN used TYPE bigint;
