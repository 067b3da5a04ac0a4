-- When a notification of a kind from one person to another was last pushed live: a repeat within
-- the window (FOLLOW_NOTIFICATION_PUSH_WINDOW_SECONDS) is stored and listed but not pushed, so a
-- follow loop rings the phone once. Written in the transaction that stores the notification, so a
-- rolled-back attempt leaves no mark. One row per pair and kind; user.deleted removes a user's.
CREATE TABLE notification_pushes (
    user_id uuid NOT NULL,
    actor_id uuid NOT NULL,
    type text NOT NULL,
    pushed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, actor_id, type)
);
CREATE INDEX notification_pushes_actor ON notification_pushes (actor_id);
