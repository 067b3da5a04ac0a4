-- What the vision model said of an analysed meal: {provider, model, items: [{name, grams,
-- confidence, source}], duration_ms}. NULL for a meal typed in.
ALTER TABLE meals ADD COLUMN analysis jsonb;
CREATE INDEX meals_user_analyzed ON meals (user_id, eaten_at DESC, id DESC) WHERE analysis IS NOT NULL;

-- Analyses that succeeded, per user and local day (the user's day when the analysis was made): the
-- daily allowance counts these. A failed analysis never reaches this table; a deleted meal still
-- counted on its day.
CREATE TABLE meal_analysis_days (
    user_id uuid NOT NULL,
    local_date date NOT NULL,
    analyses integer NOT NULL CHECK (analyses >= 0),
    PRIMARY KEY (user_id, local_date)
);
