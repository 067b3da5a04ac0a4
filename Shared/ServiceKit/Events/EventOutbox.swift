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

    public let producer: String

    public init(producer: String) {
        self.producer = producer
    }

    /// Records one event. `live` also publishes it on `user:<user_id>` for the realtime stream.
    @discardableResult
    public func write<Payload: EventPayload>(
        _ payload: Payload, userID: UUID?, live: Bool = false,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> EventEnvelope {
        let envelope = try EventEnvelope(payload, producer: producer, userID: userID)
        try await write(envelope, live: live, on: connection, logger: logger)
        return envelope
    }

    public func write(_ envelope: EventEnvelope, live: Bool = false, on connection: PostgresConnection, logger: Logger) async throws {
        for try await _ in try await connection.checkedExecute(Insert(envelope: envelope, live: live && envelope.userID != nil), logger: logger) {}
        WorkBell.ringAfterCommit(Self.bell)
    }

    /// Prepared once per connection, as every route that causes an event runs it: as an unnamed
    /// statement PostgreSQL parsed and planned it each time. The table is the one on the
    /// connection's `search_path`, the service's own schema.
    struct Insert: PostgresPreparedStatement {
        static let name = "event_outbox.insert"
        static let sql = "INSERT INTO outbox (id, type, user_id, live, envelope) VALUES ($1, $2, $3, $4, $5)"
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .uuid, .bool, .text]
        typealias Row = Void

        let envelope: EventEnvelope
        let live: Bool

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 5)
            bindings.append(envelope.id)
            bindings.append(envelope.type)
            if let user = envelope.userID { bindings.append(user) } else { bindings.appendNull() }
            bindings.append(live)
            bindings.append(envelope.json)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }
}
