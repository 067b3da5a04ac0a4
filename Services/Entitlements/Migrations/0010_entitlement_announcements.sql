-- What `entitlement.changed` last said of each user (`EntitlementSummary.fingerprint`), and when
-- their entitlement next changes by the clock alone: a subscription's end or grace, a grant's end.
-- Such a change comes with no request, and Apple's notification of it (EXPIRED) arrives after the
-- end, when the entitlement already reads as expired: the sweep (`ExpiryAnnouncer`) announces it.
CREATE TABLE entitlement_announcements (
    user_id uuid PRIMARY KEY,
    -- NULL: not known; the next look announces the user as they stand.
    fingerprint text,
    next_change_at timestamptz
);
CREATE INDEX entitlement_announcements_due ON entitlement_announcements (next_change_at) WHERE next_change_at IS NOT NULL;

-- Everyone with a subscription or a grant is looked at once, and announced as they stand: an end
-- that passed unannounced before this table is announced then.
INSERT INTO entitlement_announcements (user_id, fingerprint, next_change_at)
SELECT user_id, NULL, now() FROM subscriptions WHERE user_id IS NOT NULL
UNION
SELECT user_id, NULL, now() FROM grants
ON CONFLICT DO NOTHING;
