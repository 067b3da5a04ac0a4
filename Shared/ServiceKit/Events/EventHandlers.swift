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

/// The event types a service consumes and what it does with each. Types not registered here are
/// acknowledged and skipped.
public struct EventHandlers: Sendable {
    public typealias Handler = @Sendable (EventContext) async throws -> Void
    private(set) var handlers: [String: Handler] = [:]

    public init() {}

    /// Registers the handler of one typed event.
    public mutating func on<Payload: EventPayload>(_: Payload.Type, _ handler: @escaping @Sendable (Payload, EventContext) async throws -> Void) {
        handlers[Payload.eventType] = { context in
            try await handler(try context.envelope.decode(Payload.self), context)
        }
    }

    /// Registers a handler by type name, for events read as raw JSON.
    public mutating func on(type: String, _ handler: @escaping Handler) {
        handlers[type] = handler
    }

    package var types: [String] { handlers.keys.sorted() }
    public var isEmpty: Bool { handlers.isEmpty }
    func handler(for type: String) -> Handler? { handlers[type] }
}
