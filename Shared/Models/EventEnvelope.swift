import Foundation

/// One fact that a service tells the others, as it travels through the outbox and the Redis stream.
///
/// The envelope is the same for every event; `data` holds the type's own payload as JSON so that a
/// consumer that does not know a type can still read, skip and acknowledge it.
public struct EventEnvelope: Codable, Sendable, Equatable, Identifiable {
    public var id: UUID
    public var type: String
    public var version: Int
    public var occurredAt: Date
    public var producer: String
    public var userID: UUID?
    public var data: JSONValue

    public init(id: UUID = UUID(), type: String, version: Int = 1, occurredAt: Date = Date(), producer: String, userID: UUID?, data: JSONValue) {
        self.id = id
        self.type = type
        self.version = version
        self.occurredAt = occurredAt
        self.producer = producer
        self.userID = userID
        self.data = data
    }

    /// Wraps a typed payload; the payload type names the event type and version.
    public init<Payload: EventPayload>(_ payload: Payload, producer: String, userID: UUID?, id: UUID = UUID(), occurredAt: Date = Date()) throws {
        self.init(
            id: id, type: Payload.eventType, version: Payload.version, occurredAt: occurredAt,
            producer: producer, userID: userID, data: try JSONValue(encoding: payload)
        )
    }

    /// Decodes `data` as the payload type, after checking that the envelope carries that type.
    public func decode<Payload: EventPayload>(_: Payload.Type) throws -> Payload {
        guard type == Payload.eventType else {
            throw DecodingError.typeMismatch(Payload.self, .init(codingPath: [], debugDescription: "event is \(type), not \(Payload.eventType)"))
        }
        return try data.decode(Payload.self)
    }

    enum CodingKeys: String, CodingKey {
        case id, type, version, occurredAt = "occurred_at", producer, userID = "user_id", data
    }
}

/// A typed event payload. Types are nouns in the past tense: `user.registered`, `follow.created`.
public protocol EventPayload: Codable, Sendable {
    static var eventType: String { get }
    static var version: Int { get }
}

extension EventPayload {
    public static var version: Int { 1 }
}

extension JSONEncoder {
    /// The wire format of the whole backend: snake_case keys are spelled by `CodingKeys`, dates are RFC 3339 UTC.
    public static func api() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.string(from: date))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

extension JSONDecoder {
    /// Reads RFC 3339 dates with or without fractional seconds.
    public static func api() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = RFC3339.date(from: text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected an RFC 3339 date-time, got \(text)")
            }
            return date
        }
        return decoder
    }
}

/// RFC 3339 in UTC with milliseconds, the one date format on the wire.
public enum RFC3339 {
    public static func string(from date: Date) -> String {
        date.formatted(.iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: true).timeSeparator(.colon).timeZone(separator: .omitted))
    }

    public static func date(from text: String) -> Date? {
        if let date = try? Date(text, strategy: .iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: true).timeSeparator(.colon).timeZone(separator: .omitted)) {
            return date
        }
        if let date = try? Date(text, strategy: .iso8601) { return date }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)
    }
}
