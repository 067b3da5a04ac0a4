-- Provider sign-ins already made, by the SHA-256 of what they were made with (the nonce this
-- service issued, or the ID token itself where PROVIDER_NONCE_REQUIRED=false let it come without
-- one), each kept until it could no longer be sent again, so that a copied sign-in signs no one in a
-- second time. AuthJanitor removes them an hour after that.
CREATE TABLE spent_provider_sign_ins (
    value_hash bytea PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX spent_provider_sign_ins_expires_at ON spent_provider_sign_ins (expires_at);
