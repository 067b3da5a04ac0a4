-- The number invitations' database gave the `invitation.accepted` of `client_since` (the envelope's
-- `sequence`): a `client.unlinked` is compared with it, not with the clock of whichever invitations
-- process wrote either event. NULL when that event carried none (relayed before envelopes did).
ALTER TABLE users ADD COLUMN client_since_seq bigint;
