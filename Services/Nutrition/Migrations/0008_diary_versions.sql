-- Each diary's version, on its profile: a new number whenever what its trends show may have
-- changed (an eaten meal logged, corrected, renamed or removed; a calorie goal set), in the same
-- transaction as the change. A trend computed for a version is kept by the replica that computed
-- it and served again while the profile still reads that version. Numbers come from one sequence,
-- so none is ever seen twice, not even by a profile made again.
CREATE SEQUENCE diary_versions;
ALTER TABLE profiles ADD COLUMN diary_version bigint NOT NULL DEFAULT nextval('diary_versions');

CREATE FUNCTION diary_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'meals' THEN
        -- A meal not yet eaten, before and after, is in no trend.
        IF NOT ((TG_OP IN ('UPDATE', 'DELETE') AND OLD.consumed) OR (TG_OP IN ('INSERT', 'UPDATE') AND NEW.consumed)) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE profiles SET diary_version = nextval('diary_versions') WHERE user_id = OLD.user_id;
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.user_id IS DISTINCT FROM OLD.user_id) THEN
        UPDATE profiles SET diary_version = nextval('diary_versions') WHERE user_id = NEW.user_id;
    END IF;
    RETURN NULL;
END $$;

-- Every column a trend shows or is ordered by (a share link's view count is not one). After the
-- day-row triggers (triggers fire in name order), under the user's day-row lock they take.
CREATE TRIGGER meals_versions_diary AFTER INSERT OR DELETE OR UPDATE OF consumed, local_date, eaten_at, name, calories, protein_g, carbs_g, fat_g, diet_score, user_id
ON meals FOR EACH ROW EXECUTE FUNCTION diary_changed();

CREATE TRIGGER calorie_goals_version_diary AFTER INSERT OR DELETE OR UPDATE
ON calorie_goals FOR EACH ROW EXECUTE FUNCTION diary_changed();
