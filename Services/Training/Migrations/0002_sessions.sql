-- Roster entries as invitations announces them, the sessions coaches assign (each a copy of its
-- workout), what clients log against them, the comments on a session, and each user's settings.

-- A coach's roster entry (the `id` of invitations' `GET /v1/clients`), known from `client.invited`;
-- `client_id` is the client's account once `invitation.accepted` names the entry. An entry only
-- ever moves forward (pending, accepted, left, removed), so events arriving out of order settle on
-- the furthest state: `stage` only grows.
CREATE TABLE roster_entries (
    id         uuid PRIMARY KEY,
    coach_id   uuid NOT NULL,
    client_id  uuid,
    stage      smallint NOT NULL DEFAULT 0 CHECK (stage BETWEEN 0 AND 3),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX roster_entries_coach ON roster_entries (coach_id);
CREATE INDEX roster_entries_client ON roster_entries (client_id) WHERE client_id IS NOT NULL;

-- One scheduled workout of one client. `blocks` is the workout's blocks as they were when it was
-- assigned (or pushed), with each exercise's name frozen beside its id. `client_id` is NULL while the
-- roster entry has no account yet; the acceptance fills it. `coach_id` is NULL once the coach's
-- account is gone (the client keeps what they performed). `status`: `scheduled` until the client
-- logs (`completed`, `partial`) or skips it; `cancelled` when the link ended before it was done.
CREATE TABLE sessions (
    id              uuid PRIMARY KEY,
    coach_id        uuid,
    roster_entry_id uuid,
    client_id       uuid,
    workout_id      uuid,
    name            text NOT NULL,
    notes           text,
    blocks          jsonb NOT NULL,
    scheduled_on    date NOT NULL,
    status          text NOT NULL DEFAULT 'scheduled' CHECK (status IN ('scheduled', 'completed', 'partial', 'skipped', 'cancelled')),
    performed_at    timestamptz,
    -- The local day of `performed_at` as its own offset said: records are dated by it.
    performed_on    date,
    log_notes       text,
    skip_reason     text,
    logged_at       timestamptz,
    version         integer NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
-- Today and My Workouts: one client's days.
CREATE INDEX sessions_client_day ON sessions (client_id, scheduled_on, id) WHERE client_id IS NOT NULL;
-- The coach's view of one roster entry, and the acceptance moving them.
CREATE INDEX sessions_entry_day ON sessions (roster_entry_id, scheduled_on, id) WHERE roster_entry_id IS NOT NULL;
CREATE INDEX sessions_coach ON sessions (coach_id) WHERE coach_id IS NOT NULL;
-- Push: the copies of one workout not started yet.
CREATE INDEX sessions_workout ON sessions (workout_id) WHERE status = 'scheduled';
-- History: a client's performed sessions, newest first.
CREATE INDEX sessions_history ON sessions (client_id, performed_at DESC, id DESC) WHERE performed_at IS NOT NULL;

-- The sets a client logged, one row each, numbered from 1 as the session's blocks and sets are.
-- Weights are kilograms, exactly as given or converted from pounds (1 lb = 0.45359237 kg).
CREATE TABLE session_sets (
    session_id   uuid NOT NULL REFERENCES sessions ON DELETE CASCADE,
    block        smallint NOT NULL,
    set_number   smallint NOT NULL,
    client_id    uuid NOT NULL,
    exercise_id  uuid NOT NULL,
    reps         integer,
    duration_s   integer,
    distance_m   numeric,
    weight_kg    numeric,
    rpe          numeric,
    done         boolean NOT NULL,
    performed_at timestamptz NOT NULL,
    performed_on date NOT NULL,
    PRIMARY KEY (session_id, block, set_number)
);
-- History of one exercise and the records: one client's sets of one exercise, newest first.
CREATE INDEX session_sets_exercise ON session_sets (client_id, exercise_id, performed_at DESC);

-- Coach and client talking about one session.
CREATE TABLE session_comments (
    id          uuid PRIMARY KEY,
    session_id  uuid NOT NULL REFERENCES sessions ON DELETE CASCADE,
    author_id   uuid NOT NULL,
    author_role text NOT NULL CHECK (author_role IN ('coach', 'client')),
    text        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_comments_session ON session_comments (session_id, created_at, id);
CREATE INDEX session_comments_author ON session_comments (author_id);

-- Each user's settings; a user without a row has the defaults (UTC, kilograms).
CREATE TABLE user_settings (
    user_id     uuid PRIMARY KEY,
    time_zone   text NOT NULL DEFAULT 'UTC',
    weight_unit text NOT NULL DEFAULT 'kg' CHECK (weight_unit IN ('kg', 'lbs')),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
