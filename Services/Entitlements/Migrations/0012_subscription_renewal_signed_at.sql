-- When the renewal info a subscription holds was signed, apart from `signed_at` (the transaction's):
-- a notification about an older period carries current renewal info, and moving the one marker
-- for it made the notification about the current period that was signed before it (a refund)
-- count as stale, and be dropped. Null until renewal info is applied after this migration; it is
-- then compared as `signed_at` was.
ALTER TABLE subscriptions ADD COLUMN renewal_signed_at timestamptz;
