-- The roles and status each account stands at came from auth's events, ordered by the time each
-- event said. Their order now lives in the kit's `event_latest` (by auth's sequence): each account's
-- last applied change is marked there with its time, so that an event older than it, delivered
-- after this release starts, is not applied (the kit compares by time where no sequence is known).
INSERT INTO event_latest (subject, topic, seq, occurred_at)
SELECT user_id, 'roles', NULL::bigint, roles_changed_at FROM account_standing WHERE roles_changed_at IS NOT NULL
UNION ALL
SELECT user_id, 'status', NULL::bigint, status_changed_at FROM account_standing WHERE status_changed_at IS NOT NULL
ON CONFLICT DO NOTHING;
