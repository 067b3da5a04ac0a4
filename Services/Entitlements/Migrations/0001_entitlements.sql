-- Who buys: the stable token an app passes to StoreKit as `appAccountToken`, and the address auth
-- announced (for memberships by email).
CREATE TABLE customers (
    user_id uuid PRIMARY KEY,
    app_account_token uuid NOT NULL UNIQUE,
    email_normalized text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX customers_email ON customers (email_normalized) WHERE email_normalized IS NOT NULL;

-- One row per App Store subscription (its original transaction): the latest verified state, and
-- the `signed_at` of what set it, so an older payload never overwrites a newer one.
CREATE TABLE subscriptions (
    original_transaction_id text PRIMARY KEY,
    user_id uuid,
    product_id text NOT NULL,
    environment text NOT NULL,
    app_account_token uuid,
    transaction_id text NOT NULL,
    purchased_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz,
    revocation_reason integer,
    will_renew boolean,
    renewal_product_id text,
    billing_retry boolean NOT NULL DEFAULT false,
    grace_period_ends_at timestamptz,
    signed_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscriptions_user ON subscriptions (user_id);

-- Every verified transaction as received: the history `explain` shows, and accounting's record.
CREATE TABLE transactions (
    transaction_id text NOT NULL,
    signed_at timestamptz NOT NULL,
    original_transaction_id text NOT NULL,
    user_id uuid,
    product_id text NOT NULL,
    purchased_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz,
    environment text NOT NULL,
    received_via text NOT NULL CHECK (received_via IN ('device', 'notification')),
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (transaction_id, signed_at)
);
CREATE INDEX transactions_original ON transactions (original_transaction_id, signed_at);

-- Server notifications, one row per `notificationUUID`: a redelivery finds its row and changes nothing.
CREATE TABLE notifications (
    notification_uuid text PRIMARY KEY,
    notification_type text NOT NULL,
    subtype text,
    original_transaction_id text,
    environment text,
    signed_at timestamptz NOT NULL,
    applied boolean NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notifications_original ON notifications (original_transaction_id, signed_at);

-- A tier given by an administrator until a date, who and why recorded.
CREATE TABLE grants (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL,
    tier text NOT NULL,
    until timestamptz NOT NULL,
    reason text NOT NULL,
    granted_by uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    revoked_by uuid
);
CREATE INDEX grants_user ON grants (user_id);

-- Usage counted against a tier's limits: the running total per counter, and each acquisition so
-- only those can be released.
CREATE TABLE usage_counters (
    user_id uuid NOT NULL,
    counter text NOT NULL,
    used integer NOT NULL DEFAULT 0 CHECK (used >= 0),
    PRIMARY KEY (user_id, counter)
);
CREATE TABLE usage_acquisitions (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL,
    counter text NOT NULL,
    amount integer NOT NULL CHECK (amount > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    released_at timestamptz
);
CREATE INDEX usage_acquisitions_user ON usage_acquisitions (user_id, counter);
