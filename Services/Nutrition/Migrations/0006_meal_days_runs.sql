-- Each logged day also holds `run`: how many logged days in a row end on it. A streak is then one
-- row read, not a walk over every logged day since the account began (730 rows for two years).
ALTER TABLE meal_days ADD COLUMN run integer NOT NULL DEFAULT 1;

-- The last day of the run of logged days that starts the day after `d`; null when that day is not
-- logged.
CREATE FUNCTION meal_days_run_after(u uuid, d date) RETURNS date LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM meal_days WHERE user_id = u AND local_date = d + 1) THEN (
        SELECT min(x.local_date) FROM meal_days x
        WHERE x.user_id = u AND x.local_date > d
          AND NOT EXISTS (SELECT 1 FROM meal_days y WHERE y.user_id = u AND y.local_date = x.local_date + 1))
    END
$$;

-- A day that becomes logged continues the run of the day before it and lengthens the run after it;
-- one that stops being logged shortens the run after it by its own. A user's day rows change one
-- transaction at a time (a transaction-scoped advisory lock, taken before any of them is touched):
-- two devices logging neighbouring days at once then each see the other's day, and two changes
-- never wait on each other's rows.
CREATE OR REPLACE FUNCTION meal_days_add(u uuid, d date, sign integer, cal double precision, p double precision, c double precision, f double precision, score integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    created boolean;
    gone integer;
    length integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('nutrition.meal_days:' || u::text, 0));
    INSERT INTO meal_days (user_id, local_date, meals, calories, protein_g, carbs_g, fat_g, score_sum)
    VALUES (u, d, sign, sign * cal, sign * p, sign * c, sign * f, sign * score)
    ON CONFLICT (user_id, local_date) DO UPDATE SET
        meals = meal_days.meals + EXCLUDED.meals, calories = meal_days.calories + EXCLUDED.calories,
        protein_g = meal_days.protein_g + EXCLUDED.protein_g, carbs_g = meal_days.carbs_g + EXCLUDED.carbs_g,
        fat_g = meal_days.fat_g + EXCLUDED.fat_g, score_sum = meal_days.score_sum + EXCLUDED.score_sum
    RETURNING xmax = 0 INTO created;
    IF created THEN
        UPDATE meal_days SET run = coalesce((SELECT b.run FROM meal_days b WHERE b.user_id = u AND b.local_date = d - 1), 0) + 1
        WHERE user_id = u AND local_date = d RETURNING run INTO length;
        UPDATE meal_days SET run = run + length WHERE user_id = u AND local_date > d AND local_date <= meal_days_run_after(u, d);
    END IF;
    -- A day whose last eaten meal went is no logged day (and leaves no rounding residue behind).
    DELETE FROM meal_days WHERE user_id = u AND local_date = d AND meals <= 0 RETURNING run INTO gone;
    IF gone IS NOT NULL THEN
        UPDATE meal_days SET run = run - gone WHERE user_id = u AND local_date > d AND local_date <= meal_days_run_after(u, d);
    END IF;
END $$;

-- The runs of the days already logged: consecutive days share `local_date - their rank`.
UPDATE meal_days SET run = islands.run
FROM (
    SELECT user_id, local_date, row_number() OVER (PARTITION BY user_id, start ORDER BY local_date) AS run
    FROM (SELECT user_id, local_date, local_date - (row_number() OVER (PARTITION BY user_id ORDER BY local_date))::integer AS start FROM meal_days) ranked
) islands
WHERE meal_days.user_id = islands.user_id AND meal_days.local_date = islands.local_date;
