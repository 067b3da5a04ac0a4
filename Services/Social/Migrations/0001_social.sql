-- Profiles and the social graph. Counts live on the profile row and change in the same transaction
-- as the follow rows, so a profile view never counts.
CREATE TABLE profiles (
    user_id             uuid PRIMARY KEY,
    username            text,
    display_name        text,
    bio                 text,
    avatar_etag         text,
    is_verified         boolean NOT NULL DEFAULT false,
    is_private          boolean NOT NULL DEFAULT false,
    hidden_at           timestamptz,
    dietary_preferences text[] NOT NULL DEFAULT '{}',
    allergies           jsonb NOT NULL DEFAULT '[]',
    favorite_cuisines   text[] NOT NULL DEFAULT '{}',
    cooking_preferences jsonb NOT NULL DEFAULT '{}',
    dietary_visibility  text NOT NULL DEFAULT 'followers_only' CHECK (dietary_visibility IN ('public', 'followers_only', 'private')),
    -- Onboarding steps the user answered (an empty allergy list is an answer) or skipped.
    onboarding_answered text[] NOT NULL DEFAULT '{}',
    onboarding_skipped  text[] NOT NULL DEFAULT '{}',
    followers_count     integer NOT NULL DEFAULT 0 CHECK (followers_count >= 0),
    following_count     integer NOT NULL DEFAULT 0 CHECK (following_count >= 0),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX profiles_username_key ON profiles (lower(username));
CREATE INDEX profiles_username_prefix ON profiles (lower(username) text_pattern_ops);
CREATE INDEX profiles_display_name_prefix ON profiles (lower(display_name) text_pattern_ops);

CREATE TABLE avatars (
    user_id      uuid PRIMARY KEY REFERENCES profiles ON DELETE CASCADE,
    content_type text NOT NULL,
    data         bytea NOT NULL,
    etag         text NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE follows (
    follower_id uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    followee_id uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (follower_id, followee_id),
    CHECK (follower_id <> followee_id)
);
CREATE INDEX follows_followers ON follows (followee_id, created_at DESC, follower_id);
CREATE INDEX follows_following ON follows (follower_id, created_at DESC, followee_id);

CREATE TABLE follow_requests (
    requester_id uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    target_id    uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (requester_id, target_id),
    CHECK (requester_id <> target_id)
);
CREATE INDEX follow_requests_incoming ON follow_requests (target_id, created_at DESC, requester_id);

CREATE TABLE blocks (
    blocker_id uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    blocked_id uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (blocker_id, blocked_id),
    CHECK (blocker_id <> blocked_id)
);
CREATE INDEX blocks_list ON blocks (blocker_id, created_at DESC, blocked_id);
CREATE INDEX blocks_blocked ON blocks (blocked_id);

CREATE TABLE mutes (
    muter_id   uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    muted_id   uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    until      timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (muter_id, muted_id),
    CHECK (muter_id <> muted_id)
);
CREATE INDEX mutes_list ON mutes (muter_id, created_at DESC, muted_id);
CREATE INDEX mutes_muted ON mutes (muted_id);

CREATE TABLE notifications (
    id         uuid PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    type       text NOT NULL,
    actor_id   uuid REFERENCES profiles ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    read_at    timestamptz
);
CREATE INDEX notifications_list ON notifications (user_id, created_at DESC, id);
CREATE INDEX notifications_unread ON notifications (user_id) WHERE read_at IS NULL;
CREATE INDEX notifications_actor ON notifications (actor_id);

CREATE TABLE warnings (
    id           uuid PRIMARY KEY,
    user_id      uuid NOT NULL REFERENCES profiles ON DELETE CASCADE,
    moderator_id uuid,
    reason       text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX warnings_list ON warnings (user_id, created_at DESC, id);
CREATE INDEX warnings_moderator ON warnings (moderator_id);

-- Accounts deleted by auth, as SHA-256 of the id (never the id itself): an access token outlives its
-- account by up to 15 minutes, and must not bring the profile back by lazy creation.
CREATE TABLE deleted_accounts (
    user_hash  bytea PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
