-- Tombstones keep SHA-256 of the account id (its lower-case text), as social's do: once an account
-- is deleted, no row of this schema names it, and a late event about it still finds its tombstone.
ALTER TABLE deleted_accounts ADD COLUMN user_hash bytea;
UPDATE deleted_accounts SET user_hash = sha256(convert_to(user_id::text, 'UTF8'));
ALTER TABLE deleted_accounts DROP COLUMN user_id;
ALTER TABLE deleted_accounts ALTER COLUMN user_hash SET NOT NULL;
ALTER TABLE deleted_accounts ADD PRIMARY KEY (user_hash);
