-- Each user's eaten meals summed by local day, kept by a trigger on `meals`: a trend reads one row a
-- day (30 for a month) and a streak walks days, not meals, however many meals a day holds.
CREATE TABLE meal_days (
    user_id uuid NOT NULL,
    local_date date NOT NULL,
    meals integer NOT NULL,
    calories double precision NOT NULL,
    protein_g double precision NOT NULL,
    carbs_g double precision NOT NULL,
    fat_g double precision NOT NULL,
    score_sum bigint NOT NULL,
    PRIMARY KEY (user_id, local_date)
);

CREATE FUNCTION meal_days_add(u uuid, d date, sign integer, cal double precision, p double precision, c double precision, f double precision, score integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO meal_days (user_id, local_date, meals, calories, protein_g, carbs_g, fat_g, score_sum)
    VALUES (u, d, sign, sign * cal, sign * p, sign * c, sign * f, sign * score)
    ON CONFLICT (user_id, local_date) DO UPDATE SET
        meals = meal_days.meals + EXCLUDED.meals, calories = meal_days.calories + EXCLUDED.calories,
        protein_g = meal_days.protein_g + EXCLUDED.protein_g, carbs_g = meal_days.carbs_g + EXCLUDED.carbs_g,
        fat_g = meal_days.fat_g + EXCLUDED.fat_g, score_sum = meal_days.score_sum + EXCLUDED.score_sum;
    -- A day whose last eaten meal went is no logged day (and leaves no rounding residue behind).
    DELETE FROM meal_days WHERE user_id = u AND local_date = d AND meals <= 0;
END $$;

CREATE FUNCTION meals_roll_up() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.consumed THEN
        PERFORM meal_days_add(OLD.user_id, OLD.local_date, -1, OLD.calories, OLD.protein_g, OLD.carbs_g, OLD.fat_g, OLD.diet_score);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.consumed THEN
        PERFORM meal_days_add(NEW.user_id, NEW.local_date, 1, NEW.calories, NEW.protein_g, NEW.carbs_g, NEW.fat_g, NEW.diet_score);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER meals_roll_up AFTER INSERT OR DELETE OR UPDATE OF consumed, local_date, calories, protein_g, carbs_g, fat_g, diet_score, user_id
ON meals FOR EACH ROW EXECUTE FUNCTION meals_roll_up();

INSERT INTO meal_days (user_id, local_date, meals, calories, protein_g, carbs_g, fat_g, score_sum)
SELECT user_id, local_date, count(*), sum(calories), sum(protein_g), sum(carbs_g), sum(fat_g), sum(diet_score)
FROM meals WHERE consumed GROUP BY user_id, local_date;
