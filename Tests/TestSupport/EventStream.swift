import Foundation
import Models
import ServiceKitRedis

/// A service's event stream as the tests see it: events put on it as a producer's relay puts them,
/// and the envelopes a service relayed to it.
public struct EventStream: Sendable {
    public let redis: RedisClient
    public let name: String

    public init(redis: RedisClient, name: String) {
        self.redis = redis
        self.name = name
    }

    /// `sequence`: the producer's outbox number, which its relay stamps on the envelope (none: an
    /// envelope from before they carried one, ordered by `occurredAt`).
    public func publish<Payload: EventPayload>(_ payload: Payload, producer: String, userID: UUID?, occurredAt: Date = Date(), sequence: Int64? = nil) async throws {
        let envelope = try EventEnvelope(payload, producer: producer, userID: userID, occurredAt: occurredAt)
        let json = sequence.map { EventEnvelope.stamping(envelope.json, sequence: $0) } ?? envelope.json
        _ = try await redis.xadd(name, maxLength: nil, fields: [("id", envelope.id.uuidString.lowercased()), ("type", envelope.type), ("envelope", json)])
    }

    /// The envelopes of one type, decoded as JSON objects.
    public func envelopes(_ type: String) async throws -> [[String: Any]] {
        try await redis.xrange(name, count: 100_000).compactMap { entry in
            guard entry.fields["type"] == type, let json = entry.fields["envelope"] else { return nil }
            return (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any]
        }
    }
}
