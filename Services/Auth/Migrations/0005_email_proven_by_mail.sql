-- Whether the address was proven through a mail link (verification with the account's own proof,
-- a disowning verification, or a password reset) in a way that kept no credential someone else set
-- before it. ADMIN_EMAILS grants admin only to such accounts: never on a provider's email claim,
-- never to an account whose password or sessions may belong to whoever typed the address first.
-- Accounts verified before this column existed and never linked to Apple or Google were verified
-- by mail.
ALTER TABLE users ADD COLUMN email_proven_by_mail boolean NOT NULL DEFAULT false;
UPDATE users u SET email_proven_by_mail = true
WHERE u.email_verified AND NOT EXISTS (SELECT 1 FROM identities i WHERE i.user_id = u.id);
