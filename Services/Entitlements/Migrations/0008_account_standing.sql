-- What auth's events last said of an account's standing: its roles (`user.roles_changed`, null
-- until one arrives) and whether it is disabled (`user.status_changed`), each with the time of the
-- event that set it, so that a late event changes nothing. The admin routes check the caller here:
-- a demoted or disabled admin's access token is refused once the event arrives, not when it expires.
CREATE TABLE account_standing (
    user_id uuid PRIMARY KEY,
    roles text[],
    roles_changed_at timestamptz,
    disabled boolean NOT NULL DEFAULT false,
    status_changed_at timestamptz
);
