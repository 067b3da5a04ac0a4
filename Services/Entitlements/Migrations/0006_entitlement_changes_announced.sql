-- A change of a user's inputs is also announced when it commits, on the channel
-- `<schema>_entitlement_inputs` (cut to PostgreSQL's 63 bytes) with the user's id. Every
-- entitlements process listens (`ChangeFeed`) and forgets the inputs it kept for that user, so that
-- `/me` and every check read nothing from the database while nothing of the user's has changed. PostgreSQL sends a
-- transaction's identical notifications once.
CREATE OR REPLACE FUNCTION entitlement_inputs_changed(u uuid) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM customers WHERE user_id = u) THEN
        INSERT INTO entitlement_versions (user_id) VALUES (u)
        ON CONFLICT (user_id) DO UPDATE SET version = nextval('entitlement_version_numbers')
        WHERE entitlement_versions.xmin <> pg_current_xact_id()::xid;
    ELSE
        DELETE FROM entitlement_versions WHERE user_id = u;
    END IF;
    PERFORM pg_notify(left(current_schema() || '_entitlement_inputs', 63), u::text);
END $$;
