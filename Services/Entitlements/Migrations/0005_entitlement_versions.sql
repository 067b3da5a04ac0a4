-- Each user's entitlement inputs' version: a new number whenever their customer row, a
-- subscription, a grant or a usage counter of theirs changes, written in the same transaction as the
-- change. The inputs read for a version are kept by the process that read them and used again while
-- the user still reads that version, so `/me` and every check read one number instead of the
-- subscriptions, grants and usage. Numbers come from one sequence, so none is seen twice.
CREATE SEQUENCE entitlement_version_numbers;
CREATE TABLE entitlement_versions (
    user_id uuid PRIMARY KEY,
    version bigint NOT NULL DEFAULT nextval('entitlement_version_numbers')
);
INSERT INTO entitlement_versions (user_id) SELECT user_id FROM customers;

-- Once per transaction and user: the versions in between would never be read.
CREATE FUNCTION entitlement_inputs_changed(u uuid) RETURNS void LANGUAGE sql AS $$
    INSERT INTO entitlement_versions (user_id) VALUES (u)
    ON CONFLICT (user_id) DO UPDATE SET version = nextval('entitlement_version_numbers')
    WHERE entitlement_versions.xmin <> pg_current_xact_id()::xid;
$$;

CREATE FUNCTION entitlement_inputs_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.user_id IS NOT NULL THEN
        PERFORM entitlement_inputs_changed(OLD.user_id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.user_id IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.user_id IS DISTINCT FROM OLD.user_id) THEN
        PERFORM entitlement_inputs_changed(NEW.user_id);
    END IF;
    RETURN NULL;
END $$;

-- A customer's address is not an input; their token is.
CREATE TRIGGER customers_version_inputs AFTER INSERT OR DELETE OR UPDATE OF user_id, app_account_token ON customers FOR EACH ROW EXECUTE FUNCTION entitlement_inputs_change();
CREATE TRIGGER subscriptions_version_inputs AFTER INSERT OR DELETE OR UPDATE ON subscriptions FOR EACH ROW EXECUTE FUNCTION entitlement_inputs_change();
CREATE TRIGGER grants_version_inputs AFTER INSERT OR DELETE OR UPDATE ON grants FOR EACH ROW EXECUTE FUNCTION entitlement_inputs_change();
CREATE TRIGGER usage_counters_version_inputs AFTER INSERT OR DELETE OR UPDATE ON usage_counters FOR EACH ROW EXECUTE FUNCTION entitlement_inputs_change();
