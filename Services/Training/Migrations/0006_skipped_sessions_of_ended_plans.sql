-- A plan ends with its client's leaving or its coach's account: the sessions not started are
-- cancelled, skipped ones too (earlier, only scheduled ones were, and a skipped one stayed listed
-- and open to a log with no coach behind it). This does the same for the plans that ended before:
-- those of entries left or removed, and those whose coach's account went (the sessions kept no coach).
UPDATE sessions s SET status = 'cancelled', version = s.version + 1, updated_at = now()
FROM roster_entries r
WHERE r.id = s.roster_entry_id AND r.coach_id = s.coach_id AND r.stage >= 2 AND s.status = 'skipped';

UPDATE sessions SET status = 'cancelled', version = version + 1, updated_at = now()
WHERE coach_id IS NULL AND status = 'skipped';
