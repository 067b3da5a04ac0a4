-- Social's blocks, as its `block.created` and `block.removed` say: two accounts of which one blocks
-- the other neither invite each other to a space nor see each other's invitations. One row per
-- pair and direction, holding what social's latest event of it said (`blocking`) and that event's
-- order among social's, so that an older event delivered late does not undo a newer one.
-- `user.deleted` of either side removes the row.
CREATE TABLE blocks (
    blocker_id uuid NOT NULL,
    blocked_id uuid NOT NULL,
    blocking boolean NOT NULL,
    seq bigint,
    occurred_at timestamptz NOT NULL,
    PRIMARY KEY (blocker_id, blocked_id)
);
CREATE INDEX blocks_blocked ON blocks (blocked_id);
