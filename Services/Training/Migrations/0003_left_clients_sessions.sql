-- A client who left ends their former coach's plan: the sessions they had not started are
-- cancelled, past days' too (earlier, only those from the client's today on were). This does the
-- same for the clients who left before.
UPDATE sessions s SET status = 'cancelled', version = s.version + 1, updated_at = now()
FROM roster_entries r
WHERE r.id = s.roster_entry_id AND r.coach_id = s.coach_id AND r.stage >= 2 AND s.status = 'scheduled';
