-- Each change of a diet profile or a calorie goal is announced as it commits, with the user's id,
-- on `<schema>_diet_profiles` (cut to PostgreSQL's 63 bytes, as the service cuts it). Every
-- process listens and forgets the profile it kept for that user; while it hears its own pings
-- through the same queue it serves kept profiles without reading them (a meal's post). A
-- `TRUNCATE` names no user: it announces `*`, on which every process forgets every profile.
-- Profiles change rarely, so the notification lock each notifying commit takes costs little.
CREATE FUNCTION diet_profile_changes() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_notify(left(current_schema() || '_diet_profiles', 63), OLD.user_id::text);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_notify(left(current_schema() || '_diet_profiles', 63), NEW.user_id::text);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION diet_profiles_truncated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify(left(current_schema() || '_diet_profiles', 63), '*');
    RETURN NULL;
END $$;

CREATE TRIGGER profiles_announce AFTER INSERT OR UPDATE OR DELETE ON profiles FOR EACH ROW EXECUTE FUNCTION diet_profile_changes();
CREATE TRIGGER calorie_goals_announce AFTER INSERT OR UPDATE OR DELETE ON calorie_goals FOR EACH ROW EXECUTE FUNCTION diet_profile_changes();
CREATE TRIGGER profiles_truncated_announce AFTER TRUNCATE ON profiles FOR EACH STATEMENT EXECUTE FUNCTION diet_profiles_truncated();
CREATE TRIGGER calorie_goals_truncated_announce AFTER TRUNCATE ON calorie_goals FOR EACH STATEMENT EXECUTE FUNCTION diet_profiles_truncated();
