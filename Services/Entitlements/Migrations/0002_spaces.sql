-- Shared spaces: a named space, its members with one permission each, and invitations by address
-- for people who have no account yet.

-- `pending_owner_id`: the member the owner offered ownership to (one offer at a time, a new one
-- replaces it) until they accept. Every change of members or ownership locks this row first
-- (`FOR UPDATE`), so the changes of one space run one after the other.
CREATE TABLE spaces (
    id uuid PRIMARY KEY,
    name text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 100),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    pending_owner_id uuid,
    transfer_offered_at timestamptz
);

-- Who belongs to a space and with what permission; the owner is a member too. `user_id` is auth's
-- user id (no foreign key: accounts live in auth, and `user.deleted` removes their rows here).
CREATE TABLE space_members (
    space_id uuid NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    user_id uuid NOT NULL,
    permission text NOT NULL CHECK (permission IN ('owner', 'editor', 'commenter', 'viewer')),
    joined_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space_id, user_id)
);
-- Exactly one owner: the row lock serializes transfers, and this makes a second owner impossible
-- even for code that forgot the lock. A transfer demotes the old owner before it promotes the new.
CREATE UNIQUE INDEX space_members_one_owner ON space_members (space_id) WHERE permission = 'owner';
-- "My spaces" and `user.deleted` look members up by user.
CREATE INDEX space_members_user ON space_members (user_id);

-- Memberships waiting for an address to register (`user.registered` turns them into members).
-- Never `owner`; one per space and address.
CREATE TABLE space_invitations (
    space_id uuid NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    email_normalized text NOT NULL,
    permission text NOT NULL CHECK (permission IN ('editor', 'commenter', 'viewer')),
    invited_by uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space_id, email_normalized)
);
-- A registration finds its invitations by address.
CREATE INDEX space_invitations_email ON space_invitations (email_normalized);
