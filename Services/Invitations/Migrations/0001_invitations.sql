-- Coaches' clients and their invitations, the accounts they belong to as auth and social announce
-- them, and the addresses that asked for no more invitation mail. Codes and unsubscribe tokens are
-- stored only as SHA-256 hashes.

-- Accounts as auth announces them (user.registered, user.email_verified, user.roles_changed,
-- user.signed_in, user.deleted), with the public card social announces (profile.updated).
CREATE TABLE accounts (
    user_id uuid PRIMARY KEY,
    email text NOT NULL,
    email_normalized text NOT NULL,
    email_verified boolean NOT NULL DEFAULT false,
    display_name text,
    avatar_url text,
    roles text[] NOT NULL DEFAULT ARRAY['user'],
    last_sign_in_at timestamptz
);
CREATE INDEX accounts_email ON accounts (email_normalized);

-- One row per client of a coach, holding the client's one invitation: a resend gives it a new code
-- (the old one stops working), a revoke or an acceptance ends it.
CREATE TABLE clients (
    id uuid PRIMARY KEY,
    coach_id uuid NOT NULL,
    -- NULL once the client's account is deleted: the roster keeps the entry as `left`, no more.
    name text,
    email text,
    email_normalized text,
    phone text,
    notes text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    invitation_id uuid NOT NULL,
    -- `expired` is not stored: a pending invitation past `expires_at` is expired.
    status text NOT NULL CHECK (status IN ('pending', 'accepted', 'revoked', 'left')),
    code_hash bytea,
    sent_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    resend_count int NOT NULL DEFAULT 0,
    accepted_at timestamptz,
    left_at timestamptz,
    -- The client's account, once accepted.
    client_user_id uuid,
    -- Accepted from an Apple private-relay address other than the invited one.
    accepted_via_relay boolean NOT NULL DEFAULT false,
    -- The latest invitation mail (mail_outbox), for the roster's delivery state.
    mail_id uuid
);
CREATE UNIQUE INDEX clients_code ON clients (code_hash) WHERE code_hash IS NOT NULL;
CREATE INDEX clients_roster ON clients (coach_id, created_at DESC, id DESC);
CREATE INDEX clients_address ON clients (coach_id, email_normalized);
-- A client has at most one coach.
CREATE UNIQUE INDEX clients_one_coach ON clients (client_user_id) WHERE status = 'accepted';
CREATE INDEX clients_pending_to ON clients (email_normalized) WHERE status = 'pending';

-- Every invitation mail sent (first sends and resends), for the daily limits. Not tied to the client
-- row: deleting a client does not give its sends back.
CREATE TABLE invitation_sends (
    coach_id uuid NOT NULL,
    client_id uuid NOT NULL,
    kind text NOT NULL CHECK (kind IN ('invite', 'resend')),
    sent_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX invitation_sends_client ON invitation_sends (client_id, sent_at);
CREATE INDEX invitation_sends_coach ON invitation_sends (coach_id, sent_at);

-- Addresses that unsubscribed (RFC 8058 one-click): no coach's invitation mail goes to them.
CREATE TABLE unsubscribed_addresses (
    email_normalized text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The token of each unsubscribe link, by hash, and the address it speaks for.
CREATE TABLE unsubscribe_tokens (
    token_hash bytea PRIMARY KEY,
    email_normalized text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
