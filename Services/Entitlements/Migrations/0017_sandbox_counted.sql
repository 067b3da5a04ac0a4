-- Whether the App Store sandbox purchases a user holds counted (`APPLE_ACCEPT_SANDBOX`) when their
-- entitlement was last announced; NULL when they hold none. The setting is configuration: a start
-- with the other value changes what such a user has with no request, and the sweep
-- (`ExpiryAnnouncer`) looks again at each user announced under the other value.
ALTER TABLE entitlement_announcements ADD COLUMN sandbox_counted boolean;
CREATE INDEX entitlement_announcements_sandbox ON entitlement_announcements (sandbox_counted) WHERE sandbox_counted IS NOT NULL;

-- The setting of the process that started last. Only processes with that setting look again at
-- users announced under the other: while a rolling restart runs both, the processes it is replacing
-- do not announce back what the new ones announced.
CREATE TABLE sandbox_setting (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    accepts boolean NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now()
);

-- Builds before this one counted a sandbox purchase whatever the setting, and leave this column as it
-- is: each holder is recorded as announced with their sandbox purchases counting.
INSERT INTO entitlement_announcements (user_id, fingerprint, next_change_at, sandbox_counted)
SELECT DISTINCT user_id, NULL, now(), true FROM subscriptions WHERE user_id IS NOT NULL AND environment = 'Sandbox'
ON CONFLICT (user_id) DO UPDATE SET sandbox_counted = true;
