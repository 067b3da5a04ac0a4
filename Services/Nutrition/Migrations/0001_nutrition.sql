-- The diet profile: what meals are scored against and how their local day is found.
CREATE TABLE profiles (
    user_id uuid PRIMARY KEY,
    diet text NOT NULL DEFAULT 'balanced',
    custom_protein numeric,
    custom_carbs numeric,
    custom_fat numeric,
    weight_unit text NOT NULL DEFAULT 'kg' CHECK (weight_unit IN ('kg', 'lbs')),
    time_zone text NOT NULL DEFAULT 'UTC',
    day_starts_at smallint NOT NULL DEFAULT 0 CHECK (day_starts_at BETWEEN 0 AND 6),
    -- From social's `profile.updated`: [{name, severity}].
    allergies jsonb NOT NULL DEFAULT '[]',
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Calorie goals by the local date they start on: a past day is judged by the goal it had.
CREATE TABLE calorie_goals (
    user_id uuid NOT NULL,
    effective_from date NOT NULL,
    daily_calories integer NOT NULL CHECK (daily_calories BETWEEN 800 AND 10000),
    PRIMARY KEY (user_id, effective_from)
);

-- A meal with its items, totals and score as computed when written; `local_date` is the day it
-- counts for, fixed at write time. `version` is the ETag.
CREATE TABLE meals (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL,
    name text NOT NULL,
    eaten_at timestamptz NOT NULL,
    local_date date NOT NULL,
    items jsonb NOT NULL,
    calories double precision NOT NULL,
    protein_g double precision NOT NULL,
    carbs_g double precision NOT NULL,
    fat_g double precision NOT NULL,
    fiber_g double precision NOT NULL,
    sugar_g double precision NOT NULL,
    saturated_fat_g double precision NOT NULL,
    sodium_mg double precision NOT NULL,
    diet text NOT NULL,
    diet_score integer NOT NULL,
    score_band text NOT NULL,
    score jsonb NOT NULL,
    algorithm_version text NOT NULL,
    allergy_warnings jsonb NOT NULL DEFAULT '[]',
    warnings jsonb NOT NULL DEFAULT '[]',
    notes text,
    photo_url text,
    consumed boolean NOT NULL DEFAULT false,
    consumed_at timestamptz,
    consumed_notes text,
    edited boolean NOT NULL DEFAULT false,
    view_count integer NOT NULL DEFAULT 0,
    version bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- The list, newest first, by the caller.
CREATE INDEX meals_user_eaten ON meals (user_id, eaten_at DESC, id DESC);
-- Trends: consumed meals by their stored local day, with what the aggregates need in the index.
CREATE INDEX meals_user_day_consumed ON meals (user_id, local_date) INCLUDE (calories, protein_g, carbs_g, fat_g, diet_score) WHERE consumed;

-- One row per user per local day: the day's weight (kilograms, exactly) and ketone level.
CREATE TABLE body_metrics (
    user_id uuid NOT NULL,
    local_date date NOT NULL,
    weight_kg numeric,
    weight_notes text,
    ketones_mmol numeric,
    ketone_notes text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, local_date)
);

-- Share links: the token only as its hash, the snapshot taken when the link was made. A link of a
-- deleted meal (or user) stays as a row without its snapshot, so it answers 410 rather than 404.
CREATE TABLE shares (
    token_hash bytea PRIMARY KEY,
    meal_id uuid NOT NULL,
    user_id uuid,
    snapshot jsonb NOT NULL,
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX shares_meal ON shares (meal_id);

-- Coaches and their clients, from invitations' events: who may read whose diary.
CREATE TABLE coach_links (
    coach_id uuid NOT NULL,
    client_id uuid NOT NULL,
    linked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (coach_id, client_id)
);
CREATE INDEX coach_links_client ON coach_links (client_id);
