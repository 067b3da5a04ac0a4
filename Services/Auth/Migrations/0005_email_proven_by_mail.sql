-- Whether the address was proven through a mail link (verification with the account's own proof,
-- a disowning verification, or a password reset) in a way that kept no credential someone else set
-- before it. ADMIN_EMAILS grants admin only to such accounts: never on a provider's email claim,
-- never to an account whose password or sessions may belong to whoever typed the address first.
-- Accounts verified before this column existed were verified by the link alone, which may have kept
-- a squatter's password: they start unproven (a password reset proves them).
ALTER TABLE users ADD COLUMN email_proven_by_mail boolean NOT NULL DEFAULT false;
