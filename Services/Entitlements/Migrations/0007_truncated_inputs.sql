-- A `TRUNCATE` fires no row trigger, and names no user: emptying an input table gives every user a
-- new version and announces `*` (no user's id), on which every process forgets all it kept.
CREATE FUNCTION entitlement_inputs_truncated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE entitlement_versions SET version = nextval('entitlement_version_numbers');
    PERFORM pg_notify(left(current_schema() || '_entitlement_inputs', 63), '*');
    RETURN NULL;
END $$;

CREATE TRIGGER customers_truncated AFTER TRUNCATE ON customers FOR EACH STATEMENT EXECUTE FUNCTION entitlement_inputs_truncated();
CREATE TRIGGER subscriptions_truncated AFTER TRUNCATE ON subscriptions FOR EACH STATEMENT EXECUTE FUNCTION entitlement_inputs_truncated();
CREATE TRIGGER grants_truncated AFTER TRUNCATE ON grants FOR EACH STATEMENT EXECUTE FUNCTION entitlement_inputs_truncated();
CREATE TRIGGER usage_counters_truncated AFTER TRUNCATE ON usage_counters FOR EACH STATEMENT EXECUTE FUNCTION entitlement_inputs_truncated();
