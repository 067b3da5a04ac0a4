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
        guard envelope.sequence == nil else { throw AlreadyRelayed(eventID: envelope.id) }
        let recipient = liveTo ?? (live ? envelope.userID : nil)
        for try await _ in try await connection.checkedExecute(Insert(envelope: envelope, liveTo: recipient), logger: logger) {}
        WorkBell.ringAfterCommit(Self.bell)
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
        static let sql = "INSERT INTO outbox (id, type, user_id, live, live_to, envelope) VALUES ($1, $2, $3, $4, $5, $6) RETURNING 1"
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .uuid, .bool, .uuid, .text]
        typealias Row = Void

        let envelope: EventEnvelope
        /// Who gets the live copy; nil for none.
        let liveTo: UUID?

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 6)
            bindings.append(envelope.id)
            bindings.append(envelope.type)
            if let user = envelope.userID { bindings.append(user) } else { bindings.appendNull() }
            bindings.append(liveTo != nil)
            if let liveTo { bindings.append(liveTo) } else { bindings.appendNull() }
            bindings.append(envelope.json)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }
}
