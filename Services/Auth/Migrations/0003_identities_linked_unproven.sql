-- A provider sign-in linked while nobody had proven the address (the provider had not verified it):
-- the address's owner may not be its holder, and a password reset, which proves the address, removes
-- such sign-ins even when the address was verified by mail in between. Existing identities of
-- accounts still unverified are such sign-ins.
ALTER TABLE identities ADD COLUMN linked_unproven boolean NOT NULL DEFAULT false;
UPDATE identities i SET linked_unproven = true FROM users u WHERE u.id = i.user_id AND NOT u.email_verified;
