-- When the account last stopped being anyone's client (the `client.unlinked` without another coach,
-- and the number invitations' database gave it): an `invitation.accepted` from before it, handled
-- after it (the other process took it first, or a failed try was retried), grants no role back.
-- Kept whether or not the account held the role when the unlink came.
ALTER TABLE users ADD COLUMN client_until timestamptz, ADD COLUMN client_until_seq bigint;
