-- Renewal info is weighed against when the renewal info a subscription holds was signed, alone:
-- against `signed_at` too, a purchase the app sent (no renewal info; its transaction signed later)
-- made renewal info Apple signed before it, and sent again after a refused delivery, count as
-- stale, and its grace period was lost. Subscriptions whose renewal info was applied before
-- `renewal_signed_at` existed are given `signed_at`, as they were compared with it until now.
UPDATE subscriptions SET renewal_signed_at = signed_at WHERE renewal_signed_at IS NULL AND will_renew IS NOT NULL;
