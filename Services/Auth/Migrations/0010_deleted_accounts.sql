-- Accounts deleted here, as SHA-256 of the id (never the id itself), as every service keeps them: an
-- access token outlives its account by up to 15 minutes, and the kit's account hold
-- (`hold_live_account`, taken by a keyed request's claim of its `Idempotency-Key`) refuses it.
CREATE TABLE deleted_accounts (
    user_hash  bytea PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
