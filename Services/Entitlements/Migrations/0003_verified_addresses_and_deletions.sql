-- An address counts for space invitations only once proven (`user.email_verified`, or Apple or
-- Google at sign-up): registering someone else's address must not take their invitations.
ALTER TABLE customers ADD COLUMN email_verified boolean NOT NULL DEFAULT false;

-- Accounts auth deleted: an event about one that arrives late (a redelivery) makes nothing again.
CREATE TABLE deleted_accounts (
    user_id uuid PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
