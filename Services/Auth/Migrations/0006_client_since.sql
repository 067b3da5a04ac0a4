-- When the account last became a coach's client (the `invitation.accepted` it was granted on): a
-- `client.unlinked` that happened before it, delivered late (a retry), must not take the role away.
ALTER TABLE users ADD COLUMN client_since timestamptz;
