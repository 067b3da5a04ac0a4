-- Events can arrive late (a redelivery after a failure). When a link ended, by the event's own time,
-- so an older acceptance arriving afterwards does not give the coach the diary back.
CREATE TABLE coach_unlinks (
    coach_id uuid NOT NULL,
    client_id uuid NOT NULL,
    unlinked_at timestamptz NOT NULL,
    PRIMARY KEY (coach_id, client_id)
);

-- Accounts auth deleted: a late event about one makes nothing again.
CREATE TABLE deleted_accounts (
    user_id uuid PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
