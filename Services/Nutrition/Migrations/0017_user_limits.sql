-- Each user's tier and caps as entitlements last announced them (`entitlement.changed`), with the
-- event's order (entitlements' outbox number, else its time) so that an older event delivered late
-- changes nothing. `limits` maps a limit to its cap (JSON null: unlimited), NULL when the event
-- predates caps being carried; `limit_upgrades` maps a limit to the tier that raises it.
CREATE TABLE user_limits (
    user_id uuid PRIMARY KEY,
    tier text NOT NULL,
    limits jsonb,
    limit_upgrades jsonb NOT NULL DEFAULT '{}',
    changed_at timestamptz NOT NULL,
    changed_seq bigint
);

-- What a user no `entitlement.changed` has named yet has: the catalogue's default tier, as
-- entitlements announced it (`entitlement.catalog_changed`). One row.
CREATE TABLE limit_defaults (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    tier text NOT NULL,
    limits jsonb NOT NULL,
    limit_upgrades jsonb NOT NULL,
    changed_at timestamptz NOT NULL,
    changed_seq bigint
);
