-- Accounts, their sign-in identities, sessions with rotating refresh tokens, and single-use mail
-- tokens. Secrets (passwords, refresh and mail tokens) are stored only as hashes.

CREATE TABLE users (
    id uuid PRIMARY KEY,
    email text NOT NULL,
    -- Trimmed and lowercased: emails are compared case-insensitively and are unique that way.
    email_normalized text NOT NULL,
    email_verified boolean NOT NULL DEFAULT false,
    -- bcrypt; NULL for an account made with Apple or Google that never set a password.
    password_hash text,
    display_name text,
    roles text[] NOT NULL DEFAULT ARRAY['user'],
    disabled_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_sign_in_at timestamptz,
    CONSTRAINT users_email_unique UNIQUE (email_normalized),
    CONSTRAINT users_coach_or_client CHECK (NOT (roles @> ARRAY['coach', 'client']))
);
CREATE INDEX users_created ON users (created_at, id);
CREATE INDEX users_email_prefix ON users (email_normalized text_pattern_ops);

-- Apple and Google accounts: (provider, subject) belongs to exactly one user.
CREATE TABLE identities (
    provider text NOT NULL CHECK (provider IN ('apple', 'google')),
    subject text NOT NULL,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, subject)
);
CREATE INDEX identities_user ON identities (user_id);

CREATE TABLE sessions (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- How the session was started: password, apple or google.
    method text NOT NULL,
    user_agent text,
    ip text,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    -- Sliding: moved forward on every refresh.
    expires_at timestamptz NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id, created_at);
CREATE INDEX sessions_expires ON sessions (expires_at);

-- Every refresh token a session was given. A used one stays (used_at set) so that a second use is
-- recognised as theft and ends the session.
CREATE TABLE refresh_tokens (
    token_hash bytea PRIMARY KEY,
    session_id uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    used_at timestamptz
);
CREATE INDEX refresh_tokens_session ON refresh_tokens (session_id);

-- Links sent by mail: email verification (24 h) and password reset (1 h). Single use.
CREATE TABLE email_tokens (
    token_hash bytea PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    purpose text NOT NULL CHECK (purpose IN ('verify_email', 'reset_password')),
    email text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at timestamptz
);
CREATE INDEX email_tokens_user ON email_tokens (user_id);
CREATE INDEX email_tokens_expires ON email_tokens (expires_at);
