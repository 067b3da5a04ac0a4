-- A `TRUNCATE` fires no row trigger, and names no diary: emptying `meals` empties the day rows made
-- from them, and emptying `meals` or `calorie_goals` gives every diary a new version, so no
-- process serves a trend kept from before.
CREATE FUNCTION diaries_truncated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_TABLE_NAME = 'meals' THEN
        TRUNCATE meal_days;
    END IF;
    UPDATE diary_versions SET version = nextval('diary_version_numbers');
    RETURN NULL;
END $$;

CREATE TRIGGER meals_truncated AFTER TRUNCATE ON meals FOR EACH STATEMENT EXECUTE FUNCTION diaries_truncated();
CREATE TRIGGER calorie_goals_truncated AFTER TRUNCATE ON calorie_goals FOR EACH STATEMENT EXECUTE FUNCTION diaries_truncated();
