import Foundation
import Logging
import Models
import PostgresNIO

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
        try await connection.checkedQuery("""
            INSERT INTO outbox (id, type, user_id, live, envelope)
            VALUES (\(envelope.id), \(envelope.type), \(envelope.userID), \(live && envelope.userID != nil), \(envelope.json))
            """, logger: logger)
        WorkBell.ringAfterCommit(Self.bell)
    }
}
