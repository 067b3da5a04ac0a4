-- Each user's entitlement inputs' version: a new number whenever their customer token, a
-- subscription, a grant or a usage counter of theirs changes, written when the changing transaction
-- commits. The inputs read for a version are kept by the process that read them and used again
-- while the user still reads that version, so `/me` and every check read one number instead of the
-- subscriptions, grants and usage. Numbers come from one sequence, so none is seen twice.
-- The tables first, in the order an account's deletion writes them, so that this migration waits
-- for one running rather than deadlocking with it.
LOCK TABLE usage_counters, grants, subscriptions, customers IN SHARE ROW EXCLUSIVE MODE;

CREATE SEQUENCE entitlement_version_numbers;
CREATE TABLE entitlement_versions (
    user_id uuid PRIMARY KEY,
    version bigint NOT NULL DEFAULT nextval('entitlement_version_numbers')
);
INSERT INTO entitlement_versions (user_id) SELECT user_id FROM customers;

-- Once per transaction and user: the versions in between would never be read. A user who is no
-- longer a customer (their account deleted) keeps no version.
CREATE FUNCTION entitlement_inputs_changed(u uuid) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM customers WHERE user_id = u) THEN
        INSERT INTO entitlement_versions (user_id) VALUES (u)
        ON CONFLICT (user_id) DO UPDATE SET version = nextval('entitlement_version_numbers')
        WHERE entitlement_versions.xmin <> pg_current_xact_id()::xid;
    ELSE
        DELETE FROM entitlement_versions WHERE user_id = u;
    END IF;
END $$;

CREATE FUNCTION entitlement_inputs_change() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.user_id IS NOT NULL THEN
        PERFORM entitlement_inputs_changed(OLD.user_id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.user_id IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.user_id IS DISTINCT FROM OLD.user_id) THEN
        PERFORM entitlement_inputs_changed(NEW.user_id);
    END IF;
    RETURN NULL;
END $$;

-- Deferred to the commit, after every other lock the transaction takes: a version row locked at
-- the first write would hold it while the transaction went on to lock the user's other rows, which
-- a purchase, a notification or a deletion lock in their own orders. A customer's address is not
-- an input; their token is.
CREATE CONSTRAINT TRIGGER customers_version_inputs AFTER INSERT OR DELETE OR UPDATE OF user_id, app_account_token ON customers
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION entitlement_inputs_change();
CREATE CONSTRAINT TRIGGER subscriptions_version_inputs AFTER INSERT OR DELETE OR UPDATE ON subscriptions
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION entitlement_inputs_change();
CREATE CONSTRAINT TRIGGER grants_version_inputs AFTER INSERT OR DELETE OR UPDATE ON grants
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION entitlement_inputs_change();
CREATE CONSTRAINT TRIGGER usage_counters_version_inputs AFTER INSERT OR DELETE OR UPDATE ON usage_counters
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION entitlement_inputs_change();
