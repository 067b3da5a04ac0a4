-- Whether the sandbox purchases a user holds counted (`APPLE_ACCEPT_SANDBOX`) when their entitlement
-- was last announced; NULL when they hold none. The setting is configuration: a start with the other
-- value changes what such a user has with no request, and the sweep (`ExpiryAnnouncer`) looks again
-- at each user announced under the other value. The previous build leaves the column as it is.
ALTER TABLE entitlement_announcements ADD COLUMN sandbox_counted boolean;
CREATE INDEX entitlement_announcements_sandbox ON entitlement_announcements (sandbox_counted) WHERE sandbox_counted IS NOT NULL;

-- Builds before this one counted a sandbox purchase whatever the setting: each holder is looked at
-- once, under the setting of the first start, and told if that changes what they have.
INSERT INTO entitlement_announcements (user_id, fingerprint, next_change_at)
SELECT DISTINCT user_id, NULL, now() FROM subscriptions WHERE user_id IS NOT NULL AND environment <> 'Production'
ON CONFLICT (user_id) DO UPDATE SET next_change_at = now();
