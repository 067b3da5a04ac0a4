-- Nonces of provider sign-ins already made (by their SHA-256), each kept until it expires, so that
-- an ID token sent again with its nonce signs no one in a second time. AuthJanitor removes the
-- expired ones.
CREATE TABLE spent_provider_nonces (
    nonce_hash bytea PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX spent_provider_nonces_expires_at ON spent_provider_nonces (expires_at);
