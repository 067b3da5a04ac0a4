/// The tables the event bus needs in every service's schema. The migration runner applies this before
/// the service's own files, so each service gets the same outbox and inbox without copying the SQL.
public enum EventBusSchema {
    public static let migration = Migration(name: "0000_event_bus", sql: """
        CREATE TABLE outbox (
            seq bigserial PRIMARY KEY,
            id uuid NOT NULL UNIQUE,
            type text NOT NULL,
            user_id uuid,
            live boolean NOT NULL DEFAULT false,
            envelope text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );

        -- NOTIFY is delivered at commit and never for a rolled-back transaction, so the relay is woken
        -- exactly when there is something it may send.
        CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
            RETURN NULL;
        END $$;

        CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
            FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

        CREATE TABLE inbox (
            event_id uuid PRIMARY KEY,
            type text NOT NULL,
            handled_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX inbox_handled_at ON inbox (handled_at);
        """)

    /// The `LISTEN` channel the outbox trigger notifies.
    public static func notifyChannel(schema: String) -> String { "\(schema)_outbox" }
}
