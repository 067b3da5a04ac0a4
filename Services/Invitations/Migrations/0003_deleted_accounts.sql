-- Accounts auth deleted, by SHA-256 of the id's lower-case text (as social, nutrition and training
-- keep them): no row names a deleted account, a deleted account's token (which outlives it by up to
-- 15 minutes) is answered `401 account_deleted` at once, and a late `user.registered` does not bring
-- the account back.
CREATE TABLE deleted_accounts (
    user_hash  bytea PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
