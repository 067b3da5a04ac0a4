import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase

/// What a handler gets: the event, the transaction its inbox row is written in, and an outbox that
/// writes into the same transaction for events the handler causes.
public struct EventContext: Sendable {
    public let envelope: EventEnvelope
    public let connection: PostgresConnection
    public let outbox: EventOutbox
    public let logger: Logger
}

extension EventContext {
    /// Whether this event is newer than the last of `producer`'s events about `topic` of `subject`
    /// that this service applied (by `EventOrder`), and is recorded as the last; false for an older
    /// one, which must not undo the newer. The bus delivers out of order at times: an event whose
    /// handler failed is retried after later ones about the same user were handled, two processes
    /// of a service handle batches at once, and a replay after Redis lost its data resends old
    /// events. For handlers that make a value what the event says (a user's roles, their profile).
    /// The row it writes holds the topic until the handler's transaction ends, so two handlers of
    /// one topic at once apply in order. It holds the subject's account first (`holdLiveAccount`),
    /// as a deletion does before it removes the marks: false for a deleted account, whose id no
    /// mark may name, and one order of locks for both.
    public func isLatest(_ topic: String, of subject: UUID, among producer: String) async throws -> Bool {
        let order = EventOrder(envelope, among: producer)
        return try await connection.returnsRow(
            """
            INSERT INTO event_latest (subject, topic, seq, occurred_at)
            SELECT \(subject), \(topic), \(order.sequence), \(order.occurredAt) WHERE hold_live_account(\(subject))
            ON CONFLICT (subject, topic) DO UPDATE SET seq = EXCLUDED.seq, occurred_at = EXCLUDED.occurred_at
            WHERE CASE WHEN event_latest.seq IS NOT NULL AND EXCLUDED.seq IS NOT NULL THEN EXCLUDED.seq > event_latest.seq
                       ELSE EXCLUDED.occurred_at >= event_latest.occurred_at END
            RETURNING true
            """, logger: logger)
    }
}

/// The event types a service consumes and what it does with each. Types not registered here are
/// acknowledged and skipped; so is an event of a registered type in a version newer than the
/// handler knows (docs/EVENTS.md): a newer producer said its shape is not one this release reads.
public struct EventHandlers: Sendable {
    public typealias Handler = @Sendable (EventContext) async throws -> Void
    private(set) var handlers: [String: Handler] = [:]
    /// Type → the newest version its handler reads; it reads every version up to it.
    private(set) var versions: [String: Int] = [:]

    public init() {}

    /// Registers the handler of one typed event, for the versions up to the payload type's.
    public mutating func on<Payload: EventPayload>(_: Payload.Type, _ handler: @escaping @Sendable (Payload, EventContext) async throws -> Void) {
        handlers[Payload.eventType] = { context in
            try await handler(try context.envelope.decode(Payload.self), context)
        }
        versions[Payload.eventType] = Payload.version
    }

    /// Registers a handler by type name, for events read as raw JSON, for the versions up to `version`.
    public mutating func on(type: String, version: Int = 1, _ handler: @escaping Handler) {
        handlers[type] = handler
        versions[type] = version
    }

    package var types: [String] { handlers.keys.sorted() }
    public var isEmpty: Bool { handlers.isEmpty }

    /// What becomes of an event: its handler, or why it is left alone.
    func lookup(_ envelope: EventEnvelope) -> Lookup {
        guard let handler = handlers[envelope.type] else {
            return EventCatalog.versions[envelope.type] == nil ? .ignored(reason: "unknown_type") : .notConsumed
        }
        guard (1...max(1, versions[envelope.type] ?? 1)).contains(envelope.version) else { return .ignored(reason: "unknown_version") }
        return .handle(handler)
    }

    /// Whether events of `type` (the stream entry's own `type` field, the outbox row's) are another
    /// service's business: a type the catalogue knows and this service does not read. Such an entry is
    /// acknowledged without its envelope being decoded, which is most of what reading it would cost:
    /// every service reads the one stream. A type nobody knows still has its envelope read, to be
    /// counted and reported as `lookup` does.
    func skips(type: String) -> Bool {
        handlers[type] == nil && EventCatalog.versions[type] != nil
    }

    enum Lookup {
        case handle(Handler)
        /// A type this release knows and this service does not read: every service reads the one stream.
        case notConsumed
        /// A type or version this release does not know (from a newer one): acknowledged, and counted.
        case ignored(reason: String)
    }
}
