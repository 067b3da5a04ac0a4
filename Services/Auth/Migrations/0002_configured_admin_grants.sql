-- Accounts that ADMIN_EMAILS has made admin, once each: an admin who demotes such an account is not
-- overruled at its next sign-in or refresh. Every account that is admin now counts as granted.
CREATE TABLE configured_admin_grants (
    user_id    uuid PRIMARY KEY REFERENCES users ON DELETE CASCADE,
    granted_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO configured_admin_grants (user_id) SELECT id FROM users WHERE roles @> ARRAY['admin'];
