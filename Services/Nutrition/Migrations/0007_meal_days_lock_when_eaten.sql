-- The user's day-row lock only for a write that involves an eaten meal, before or after: logging a
-- meal not yet eaten (the common write) or correcting one changes no day row, and holding the lock
-- until its commit made a user's meal posts wait on each other's.
CREATE OR REPLACE FUNCTION meals_roll_up_best_worst() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.consumed THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('nutrition.meal_days:' || OLD.user_id::text, 0));
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.consumed THEN
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
