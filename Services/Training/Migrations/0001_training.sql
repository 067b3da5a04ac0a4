-- Exercises (the shared library and coaches' own), workouts (a coach's templates) and the coach and
-- client links the other tables' rules read. Sessions, logs, comments and settings come after.

-- Exercise names are matched with typos and plurals without an extension (a service's role may not
-- create one): an English text-search vector catches plurals and word forms, a set of trigrams
-- catches typos and run-together words. The trigrams are those of each word padded as pg_trgm pads
-- them, and of the name with its separators removed ("benchpress" meets "bench press").
CREATE FUNCTION name_trigrams(name text) RETURNS text[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT substr(padded, i, 3)), '{}')
    FROM (
        SELECT '  ' || word || ' ' AS padded
        FROM regexp_split_to_table(lower(name), '[^[:alnum:]]+') AS word
        WHERE word <> ''
        UNION
        SELECT '  ' || regexp_replace(lower(name), '[^[:alnum:]]+', '', 'g') || ' '
    ) AS words, generate_series(1, length(padded) - 2) AS i
    WHERE padded <> '   '
$$;

CREATE TABLE exercises (
    id                uuid PRIMARY KEY,
    -- NULL for the library, which every signed-in user sees; else the coach who wrote it.
    coach_id          uuid,
    -- The data set's own id, for the library's rows.
    source_id         text UNIQUE,
    name              text NOT NULL,
    category          text,
    level             text CHECK (level IN ('beginner', 'intermediate', 'expert')),
    equipment         text,
    force             text CHECK (force IN ('push', 'pull', 'static')),
    mechanic          text CHECK (mechanic IN ('compound', 'isolation')),
    primary_muscles   text[] NOT NULL DEFAULT '{}',
    secondary_muscles text[] NOT NULL DEFAULT '{}',
    instructions      text[] NOT NULL DEFAULT '{}',
    images            text[] NOT NULL DEFAULT '{}',
    version           integer NOT NULL DEFAULT 1,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    name_search       tsvector GENERATED ALWAYS AS (to_tsvector('english', name)) STORED,
    name_trigrams     text[] GENERATED ALWAYS AS (name_trigrams(name)) STORED,
    CHECK ((coach_id IS NULL) = (source_id IS NOT NULL))
);
CREATE INDEX exercises_name_search ON exercises USING gin (name_search);
CREATE INDEX exercises_name_trigrams ON exercises USING gin (name_trigrams);
CREATE INDEX exercises_muscles ON exercises USING gin ((primary_muscles || secondary_muscles));
CREATE INDEX exercises_by_name ON exercises (lower(name), id);
-- A coach's own names are unique to them, case aside.
CREATE UNIQUE INDEX exercises_coach_name ON exercises (coach_id, lower(name)) WHERE coach_id IS NOT NULL;

-- A coach's workout templates. The blocks are kept as the API writes them (checked before they are
-- stored): a workout is read and replaced whole, and a scheduled session copies it in one column.
CREATE TABLE workouts (
    id         uuid PRIMARY KEY,
    coach_id   uuid NOT NULL,
    name       text NOT NULL,
    notes      text,
    blocks     jsonb NOT NULL,
    version    integer NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workouts_coach ON workouts (coach_id, created_at DESC, id DESC);

-- The exercises each workout uses: an exercise in use cannot be deleted.
CREATE TABLE workout_exercises (
    workout_id  uuid NOT NULL REFERENCES workouts ON DELETE CASCADE,
    exercise_id uuid NOT NULL REFERENCES exercises ON DELETE RESTRICT,
    PRIMARY KEY (workout_id, exercise_id)
);
CREATE INDEX workout_exercises_exercise ON workout_exercises (exercise_id);

-- Coaches and their clients (the client's user id), from invitations' events, ordered by the
-- envelope's sequence where it has one: whose exercises a client sees, whose sessions a coach plans.
CREATE TABLE coach_links (
    coach_id   uuid NOT NULL,
    client_id  uuid NOT NULL,
    linked_at  timestamptz NOT NULL DEFAULT now(),
    linked_seq bigint,
    PRIMARY KEY (coach_id, client_id)
);
CREATE INDEX coach_links_client ON coach_links (client_id);

-- When a link ended, so that an older acceptance arriving afterwards does not link them again.
CREATE TABLE coach_unlinks (
    coach_id     uuid NOT NULL,
    client_id    uuid NOT NULL,
    unlinked_at  timestamptz NOT NULL,
    unlinked_seq bigint,
    PRIMARY KEY (coach_id, client_id)
);

-- Accounts auth deleted, by SHA-256 of the id's lower-case text (as social's and nutrition's): no
-- row names a deleted account, and a late event about one still finds its tombstone.
CREATE TABLE deleted_accounts (
    user_hash  bytea PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
