-- Each logged day also names its best and worst eaten meal (by diet score; on a tie the later
-- eaten, then the larger id), so that a trend takes its best and worst meals from its day rows (30
-- for a month) instead of sorting every meal of the period twice.
-- `meals` first: a meal write running meanwhile holds it and its trigger then wants `meal_days`, so
-- taking `meal_days` first (ALTER) and `meals` second (CREATE TRIGGER) could deadlock with it.
LOCK TABLE meals IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE meal_days
    ADD COLUMN best_meal uuid, ADD COLUMN best_score integer, ADD COLUMN best_eaten_at timestamptz,
    ADD COLUMN worst_meal uuid, ADD COLUMN worst_score integer, ADD COLUMN worst_eaten_at timestamptz;

-- The day's best and worst, read again from its meals: after a change to one that was either.
CREATE FUNCTION meal_days_pick(u uuid, d date) RETURNS void LANGUAGE sql AS $$
    UPDATE meal_days SET
        (best_meal, best_score, best_eaten_at) = (
            SELECT id, diet_score, eaten_at FROM meals WHERE user_id = u AND local_date = d AND consumed
            ORDER BY diet_score DESC, eaten_at DESC, id DESC LIMIT 1),
        (worst_meal, worst_score, worst_eaten_at) = (
            SELECT id, diet_score, eaten_at FROM meals WHERE user_id = u AND local_date = d AND consumed
            ORDER BY diet_score ASC, eaten_at DESC, id DESC LIMIT 1)
    WHERE user_id = u AND local_date = d;
$$;

-- A meal newly eaten on a day becomes its best or worst if it beats the one there: no read of the
-- day's other meals, and no write at all for a meal that is neither, as logging a meal is the
-- common write.
CREATE FUNCTION meal_days_offer(m meals) RETURNS void LANGUAGE sql AS $$
    UPDATE meal_days SET
        best_meal = CASE WHEN better THEN m.id ELSE best_meal END,
        best_score = CASE WHEN better THEN m.diet_score ELSE best_score END,
        best_eaten_at = CASE WHEN better THEN m.eaten_at ELSE best_eaten_at END,
        worst_meal = CASE WHEN worse THEN m.id ELSE worst_meal END,
        worst_score = CASE WHEN worse THEN m.diet_score ELSE worst_score END,
        worst_eaten_at = CASE WHEN worse THEN m.eaten_at ELSE worst_eaten_at END
    FROM (
        SELECT logged.best_meal IS NULL OR (m.diet_score, m.eaten_at, m.id) > (logged.best_score, logged.best_eaten_at, logged.best_meal) AS better,
               logged.worst_meal IS NULL OR m.diet_score < logged.worst_score
                 OR (m.diet_score = logged.worst_score AND (m.eaten_at, m.id) > (logged.worst_eaten_at, logged.worst_meal)) AS worse
        FROM meal_days logged WHERE logged.user_id = m.user_id AND logged.local_date = m.local_date
    ) offered
    WHERE user_id = m.user_id AND local_date = m.local_date AND (better OR worse);
$$;

-- After `meals_roll_up` (triggers fire in name order), which has made or removed the day's row.
CREATE FUNCTION meals_roll_up_best_worst() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A user's day rows change one transaction at a time, under this lock (`meal_days_add` takes it
    -- too): an edit of the time alone comes here without passing through the sums.
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('nutrition.meal_days:' || OLD.user_id::text, 0));
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('nutrition.meal_days:' || NEW.user_id::text, 0));
    END IF;
    -- The meal that left a day (deleted, uneaten, moved, rescored) may have been its best or worst.
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.consumed THEN
        PERFORM meal_days_pick(OLD.user_id, OLD.local_date)
        FROM meal_days WHERE user_id = OLD.user_id AND local_date = OLD.local_date AND OLD.id IN (best_meal, worst_meal);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.consumed THEN
        PERFORM meal_days_offer(NEW);
    END IF;
    RETURN NULL;
END $$;

-- Every column the sums follow (a change to any of them may remake the day's row, its best and
-- worst then unset), and when a meal was eaten, which orders a tie.
CREATE TRIGGER meals_roll_up_best_worst AFTER INSERT OR DELETE OR UPDATE OF consumed, local_date, eaten_at, calories, protein_g, carbs_g, fat_g, diet_score, user_id
ON meals FOR EACH ROW EXECUTE FUNCTION meals_roll_up_best_worst();

SELECT meal_days_pick(user_id, local_date) FROM meal_days;
