import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitRedis

/// Writes events into the service's outbox inside the caller's transaction: the event exists if and
/// only if the change it describes was committed.
public struct EventOutbox: Sendable {
    /// The `WorkBell` of the outbox relay: rung when a transaction that wrote events commits.
    public static let bell = "event-outbox"

    package let producer: String
    /// The time an event is stamped with (`occurred_at`): this process's clock. It may be off, so
    /// consumers order events by the `sequence` the relay adds, not by it; tests set it skewed.
    let now: @Sendable () -> Date

    public init(producer: String, now: @escaping @Sendable () -> Date = { Date() }) {
        self.producer = producer
        self.now = now
    }

    /// Records one event. `live` also sends a live copy to the event's user (`LiveStream`: their
    /// live stream and `user:<user_id>`), for the clients they have connected; `liveTo` sends it to
    /// another user instead (an accepted invitation is the client's event, and news for the coach).
    /// Which clients exist is the gateway's business: a service only says whom an event is for.
    @discardableResult
    public func write<Payload: EventPayload>(
        _ payload: Payload, userID: UUID?, live: Bool = false, liveTo: UUID? = nil,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> EventEnvelope {
        let envelope = try EventEnvelope(payload, producer: producer, userID: userID, occurredAt: now())
        try await write(envelope, live: live, liveTo: liveTo, on: connection, logger: logger)
        return envelope
    }

    /// `liveTo` implies `live`. An envelope that was relayed already (it has a `sequence`) is refused:
    /// the relay numbers each envelope once, in its own producer's order.
    public func write(_ envelope: EventEnvelope, live: Bool = false, liveTo: UUID? = nil, on connection: PostgresConnection, logger: Logger) async throws {
        let entry = try Entry(envelope, live: live, liveTo: liveTo)
        for try await _ in try await connection.checkedExecute(Insert(entry: entry), logger: logger) {}
        WorkBell.ringAfterCommit(Self.bell)
    }

    /// An event for a statement of the caller's own that writes its outbox row
    /// (`INSERT INTO outbox (\(EventOutbox.Entry.columns)) SELECT $n, …`, its values bound by
    /// `Entry.append(_:to:)` and their types declared with `Entry.bindingDataTypes` at the same
    /// positions of the statement's `bindingDataTypes`, as the NULLs of no event carry no type): a
    /// change that is one statement then commits with its event without a transaction around it.
    /// Call `wrote()` once that statement has returned, and only if it wrote the row. Only for a
    /// statement whose commit cannot fail (no deferred trigger or constraint on what it writes):
    /// PostgresNIO ends a statement's rows at its CommandComplete, and an error at the implicit
    /// commit after it closes the connection instead of reaching the caller.
    public func entry<Payload: EventPayload>(_ payload: Payload, userID: UUID?, live: Bool = false, liveTo: UUID? = nil) throws -> Entry {
        try Entry(EventEnvelope(payload, producer: producer, userID: userID, occurredAt: now()), live: live, liveTo: liveTo)
    }

    /// Wakes the relay for an entry the caller's statement wrote: inside a
    /// `PostgresClient.transaction`, when it commits; outside one, now, as the statement's commit
    /// follows its last row at once. Should the relay look before the commit (or inside a
    /// transaction begun by hand), its poll finds the row.
    public func wrote() {
        if WorkBell.inTransaction { WorkBell.ringAfterCommit(Self.bell) } else { WorkBell.ring(Self.bell) }
    }

    /// One outbox row: the envelope, and who gets its live copy.
    public struct Entry: Sendable {
        /// The outbox's columns, in the order `append(_:to:)` binds them.
        public static let columns = "id, type, user_id, live, live_to, envelope"
        public static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .uuid, .bool, .uuid, .text]

        public let envelope: EventEnvelope
        /// Who gets the live copy; nil for none.
        let liveTo: UUID?

        /// `liveTo` implies `live`. An envelope that was relayed already (it has a `sequence`) is
        /// refused: the relay numbers each envelope once, in its own producer's order.
        init(_ envelope: EventEnvelope, live: Bool, liveTo: UUID?) throws {
            guard envelope.sequence == nil else { throw AlreadyRelayed(eventID: envelope.id) }
            self.envelope = envelope
            self.liveTo = liveTo ?? (live ? envelope.userID : nil)
        }

        /// The entry's six values, or six NULLs for none.
        public static func append(_ entry: Entry?, to bindings: inout PostgresBindings) {
            guard let entry else {
                for _ in bindingDataTypes { bindings.appendNull() }
                return
            }
            bindings.append(entry.envelope.id)
            bindings.append(entry.envelope.type)
            if let user = entry.envelope.userID { bindings.append(user) } else { bindings.appendNull() }
            bindings.append(entry.liveTo != nil)
            if let liveTo = entry.liveTo { bindings.append(liveTo) } else { bindings.appendNull() }
            bindings.append(entry.envelope.json)
        }
    }

    struct AlreadyRelayed: Error, CustomStringConvertible {
        let eventID: UUID
        var description: String { "event \(eventID) was relayed already: an outbox takes only envelopes of its own producer's making" }
    }

    /// Prepared once per connection, as every route that causes an event runs it: as an unnamed
    /// statement PostgreSQL parsed and planned it each time. The table is the one on the
    /// connection's `search_path`, the service's own schema.
    struct Insert: PostgresPreparedStatement {
        static let name = "event_outbox.insert"
        // RETURNING, as every prepared statement in the kit (`checkedExecute` says why).
        static let sql = "INSERT INTO outbox (\(Entry.columns)) VALUES ($1, $2, $3, $4, $5, $6) RETURNING 1"
        static let bindingDataTypes = Entry.bindingDataTypes
        typealias Row = Void

        let entry: Entry

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 6)
            Entry.append(entry, to: &bindings)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }
}
