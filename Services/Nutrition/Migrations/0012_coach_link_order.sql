-- A link's events are ordered by the number invitations' database gave each (the envelope's
-- `sequence`), no longer by `occurred_at`, the clock of whichever invitations process wrote it.
-- NULL for events relayed before envelopes carried a number: those are still ordered by time.
ALTER TABLE coach_links ADD COLUMN linked_seq bigint;
ALTER TABLE coach_unlinks ADD COLUMN unlinked_seq bigint;
