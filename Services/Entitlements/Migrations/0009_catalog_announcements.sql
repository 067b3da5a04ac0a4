-- What the catalogue said of each tier when it was last announced (`entitlement.catalog_changed`,
-- and the `entitlement.changed` of every user a change touched): its rank, features, caps, the
-- tier that raises each cap, and its products. A start with another catalogue announces the
-- difference once, even when replicas start together (they take an advisory lock).
CREATE TABLE catalog_announcements (
    tier text PRIMARY KEY,
    summary jsonb NOT NULL,
    announced_at timestamptz NOT NULL DEFAULT now()
);
