-- Invitations of an account named by its id (`POST /v1/spaces/{id}/members {user_id}`): nobody is
-- put in a space without saying yes, so the account becomes a member only when its holder accepts
-- (`POST /v1/spaces/{id}/invitation/accept`), as an address's holder does. Never `owner`; one per
-- space and account. The owner sees it pending, and may withdraw it.
CREATE TABLE space_account_invitations (
    space_id uuid NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    user_id uuid NOT NULL,
    permission text NOT NULL CHECK (permission IN ('editor', 'commenter', 'viewer')),
    invited_by uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space_id, user_id)
);
-- The account's own list, and `user.deleted` of either side.
CREATE INDEX space_account_invitations_user ON space_account_invitations (user_id);
CREATE INDEX space_account_invitations_inviter ON space_account_invitations (invited_by);
