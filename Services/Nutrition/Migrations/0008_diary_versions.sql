-- Each diary's version: a new number whenever what its trends show may have changed (an eaten meal
-- logged, corrected, renamed or removed; a calorie goal set), written when the changing transaction
-- commits. A trend computed for a version is kept by the process that computed it and served again
-- while the diary still reads that version. Numbers come from one sequence, so none is seen twice,
-- not even for a diary made again. A table of its own rather than a profile column: a meal write
-- locks no profile row, and adding it rewrote no table.
-- `meals` first, in the order a meal write and an account's deletion lock them, so that this
-- migration waits for one running rather than deadlocking with it.
LOCK TABLE meals, calorie_goals IN SHARE ROW EXCLUSIVE MODE;

CREATE SEQUENCE diary_version_numbers;
CREATE TABLE diary_versions (
    user_id uuid PRIMARY KEY,
    version bigint NOT NULL DEFAULT nextval('diary_version_numbers')
);
INSERT INTO diary_versions (user_id) SELECT user_id FROM profiles;

-- Once per transaction and diary: the versions in between would never be read, and a statement
-- changing thousands of meals would otherwise rewrite the row thousands of times. A diary whose
-- profile is gone (its account deleted) keeps no version.
CREATE FUNCTION diary_changed(u uuid) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM profiles WHERE user_id = u) THEN
        INSERT INTO diary_versions (user_id) VALUES (u)
        ON CONFLICT (user_id) DO UPDATE SET version = nextval('diary_version_numbers')
        WHERE diary_versions.xmin <> pg_current_xact_id()::xid;
    ELSE
        DELETE FROM diary_versions WHERE user_id = u;
    END IF;
END $$;

CREATE FUNCTION diary_changes() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_TABLE_NAME = 'meals' THEN
        -- A meal not yet eaten, before and after, is in no trend.
        IF NOT ((TG_OP IN ('UPDATE', 'DELETE') AND OLD.consumed) OR (TG_OP IN ('INSERT', 'UPDATE') AND NEW.consumed)) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM diary_changed(OLD.user_id);
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.user_id IS DISTINCT FROM OLD.user_id) THEN
        PERFORM diary_changed(NEW.user_id);
    END IF;
    RETURN NULL;
END $$;

-- Deferred to the commit, after every other lock the transaction takes: a version row locked at
-- the first write would be held while the transaction went on to lock the user's profile or goals,
-- which a profile update and an account's deletion lock in their own orders. Every column a trend
-- shows or is ordered by (a share link's view count is not one).
CREATE CONSTRAINT TRIGGER meals_versions_diary AFTER INSERT OR DELETE OR UPDATE OF consumed, local_date, eaten_at, name, calories, protein_g, carbs_g, fat_g, diet_score, user_id
ON meals DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION diary_changes();
CREATE CONSTRAINT TRIGGER calorie_goals_version_diary AFTER INSERT OR DELETE OR UPDATE
ON calorie_goals DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION diary_changes();
