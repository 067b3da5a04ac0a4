import ServiceKitDatabase
/// The tables the event bus needs in every service's schema. The migration runner applies these before
/// the service's own files, so each service gets the same outbox and inbox without copying the SQL.
package enum EventBusSchema {
    package static let migrations = [created, notifyDropped, liveRecipient, relayedKept, latestApplied, lastSent, sentAgain]

    static let created = Migration(
        name: "0000_event_bus",
        sql: """
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

    /// The relay is woken in process (`WorkBell`) since: a `NOTIFY` per commit serialized every
    /// event-writing commit in the database.
    static let notifyDropped = Migration(
        name: "0000_event_bus_notify_dropped",
        sql: """
            DROP TRIGGER outbox_notify ON outbox;
            DROP FUNCTION outbox_notify();
            """)

    /// Who receives a row's live copy, when not the event's own user (`EventOutbox.write(liveTo:)`).
    /// The relay reads `coalesce(live_to, user_id)` for live rows, so rows written before stay right.
    static let liveRecipient = Migration(
        name: "0000_event_bus_live_recipient",
        sql: """
            ALTER TABLE outbox ADD COLUMN live_to uuid;
            """)

    /// What the relay sent, kept for `EVENTS_REPLAY_HOURS` so that it can be sent again when Redis
    /// comes back without its data (`OutboxRelay`).
    static let relayedKept = Migration(
        name: "0000_event_bus_relayed",
        sql: """
            CREATE TABLE outbox_relayed (
                seq bigint PRIMARY KEY,
                id uuid NOT NULL,
                type text NOT NULL,
                envelope text NOT NULL,
                relayed_at timestamptz NOT NULL DEFAULT now()
            );
            CREATE INDEX outbox_relayed_at ON outbox_relayed (relayed_at);
            -- The Redis epoch (a random value the relays keep in Redis) the kept rows were sent under.
            CREATE TABLE outbox_relay_epoch (
                only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                epoch text NOT NULL
            );
            """)

    /// The latest event applied to each subject's topic (a user's roles, their allergies), by its
    /// producer's order (`EventContext.isLatest`): an older one delivered after it is not applied.
    static let latestApplied = Migration(
        name: "0000_event_bus_latest",
        sql: """
            CREATE TABLE event_latest (
                subject uuid NOT NULL,
                topic text NOT NULL,
                seq bigint,
                occurred_at timestamptz NOT NULL,
                PRIMARY KEY (subject, topic)
            );
            """)

    /// The stream id of the last entry the schema's relays sent, as the batch that sent it commits:
    /// each batch, and a relay started again (a host's crash took it and Redis down together), look
    /// for it to tell whether Redis lost its last writes (`OutboxRelay`). Older builds neither write
    /// nor clear it: one left from before their epoch costs at most a needless replay.
    static let lastSent = Migration(
        name: "0000_event_bus_relayed_last_sent",
        sql: """
            ALTER TABLE outbox_relay_epoch ADD COLUMN last_sent text;
            """)

    /// When a kept row was last sent again, after Redis lost its data (`OutboxRelay`): its copy in
    /// the stream is then that entry, which the groups made anew have yet to read. `relayed_at`
    /// stays the first sending's, which bounds how long the row is kept. Older builds neither write
    /// nor read it: they drop a row sent again as soon as a group has read past its first sending.
    static let sentAgain = Migration(
        name: "0000_event_bus_relayed_sent_again",
        sql: """
            ALTER TABLE outbox_relayed ADD COLUMN sent_again_at timestamptz;
            """)
}
