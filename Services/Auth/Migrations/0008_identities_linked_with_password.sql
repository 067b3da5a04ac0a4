-- A provider sign-in linked to an existing account by showing the account's password, not by the
-- provider answering for the address: whoever knew the password then (perhaps someone who had it
-- for a while) linked it, so a password reset, which proves the address and replaces the password,
-- removes it. The address's owner links it again with the new password; a provider that answers
-- for the address links by itself at the next sign-in. Identities linked after their account was
-- made, before this column existed, may have been linked this way: they are counted as such, so a
-- reset or change removes them too (an identity an account was made with shares its account's
-- creation time). Those among them that the provider answered for link again by themselves.
ALTER TABLE identities ADD COLUMN linked_with_password boolean NOT NULL DEFAULT false;
UPDATE identities i SET linked_with_password = true FROM users u WHERE u.id = i.user_id AND i.created_at > u.created_at;
