import Foundation

/// One fact that a service tells the others, as it travels through the outbox and the Redis stream.
///
/// The envelope is the same for every event; `data` holds the type's own payload as JSON so that a
/// consumer that does not know a type can still read, skip and acknowledge it.
public struct EventEnvelope: Sendable, Equatable, Identifiable {
    public let id: UUID
    public let type: String
    public let version: Int
    public let occurredAt: Date
    package let producer: String
    public let userID: UUID?
    /// Where the producer's database put the event among that producer's events: the number of its
    /// outbox row, which the producer's relay adds as it sends the envelope (`stamping(_:sequence:)`).
    /// Unlike `occurredAt`, the clock of whichever process wrote it, this is decided by one server,
    /// so it orders events about one thing when clocks disagree. Numbers are taken as rows are
    /// written: they follow commit order for events whose transactions hold one lock (as those of
    /// one client's coach link do), and mean nothing across producers. Nil before the relay sent
    /// the envelope, and in envelopes relayed before it carried one.
    public let sequence: Int64?
    /// The whole envelope as it is stored in the outbox and carried by the stream:
    /// `{"data":{…},"id":…,"occurred_at":…,"producer":…,"type":…,"user_id":…,"version":…}`, with
    /// `"sequence":…` first once relayed.
    /// Made once, from the typed payload; a consumer decodes the payload straight from it.
    public let json: String

    /// Wraps a typed payload; the payload type names the event type and version.
    public init<Payload: EventPayload>(_ payload: Payload, producer: String, userID: UUID?, id: UUID = UUID(), occurredAt: Date = Date()) throws {
        self.id = id
        self.type = Payload.eventType
        self.version = Payload.version
        self.occurredAt = occurredAt
        self.producer = producer
        self.userID = userID
        self.sequence = nil
        let typed = Wire(id: id, type: type, version: version, occurredAt: occurredAt, producer: producer, userID: userID, sequence: nil, data: payload)
        self.json = String(decoding: try APIJSON.encode(typed), as: UTF8.self)
    }

    /// Reads an envelope as it came off the stream. Only the envelope's own fields are read here;
    /// `data` is decoded when a handler asks for its type, so an unknown type costs no more.
    public init(json: String) throws {
        let header = try JSONDecoder.api.decode(Wire<Present>.self, from: Data(json.utf8))
        self.id = header.id
        self.type = header.type
        // Every producer writes a version; an envelope without one is read as the first.
        self.version = header.version ?? 1
        self.occurredAt = header.occurredAt
        self.producer = header.producer
        self.userID = header.userID
        self.sequence = header.sequence
        self.json = json
    }

    /// The envelope text `json`, which has no `sequence` yet, with `sequence` added: what the relay
    /// sends. Spliced rather than encoded again, as the relay does this for every event.
    package static func stamping(_ json: String, sequence: Int64) -> String {
        guard json.first == "{" else { return json }
        let rest = json.dropFirst()
        return #"{"sequence":"# + String(sequence) + (rest.first == "}" ? "" : ",") + rest
    }

    /// Decodes `data` as the payload type, after checking that the envelope carries that type.
    public func decode<Payload: EventPayload>(_: Payload.Type) throws -> Payload {
        guard type == Payload.eventType else {
            throw DecodingError.typeMismatch(Payload.self, .init(codingPath: [], debugDescription: "event is \(type), not \(Payload.eventType)"))
        }
        return try JSONDecoder.api.decode(DataField<Payload>.self, from: Data(json.utf8)).data
    }

    /// `data` as plain JSON, for a reader that does not know the type.
    public func data() throws -> JSONValue {
        try JSONDecoder.api.decode(DataField<JSONValue>.self, from: Data(json.utf8)).data
    }

    enum CodingKeys: String, CodingKey {
        case id, type, version, occurredAt = "occurred_at", producer, userID = "user_id", sequence, data
    }

    /// The envelope on the wire: encoded with the typed payload as `data`, decoded with `Present`
    /// as `data` to read only the envelope's own fields.
    fileprivate struct Wire<Payload> {
        var id: UUID
        var type: String
        var version: Int?
        var occurredAt: Date
        var producer: String
        var userID: UUID?
        var sequence: Int64?
        var data: Payload
        typealias CodingKeys = EventEnvelope.CodingKeys
    }

    /// Any JSON value, skipped: an envelope without `data` is unreadable, whatever its type.
    private struct Present: Decodable {
        init(from decoder: any Decoder) throws {}
    }

    private struct DataField<Payload: Decodable>: Decodable {
        var data: Payload
    }
}

extension EventEnvelope.Wire: Encodable where Payload: Encodable {}
extension EventEnvelope.Wire: Decodable where Payload: Decodable {}

/// A typed event payload. Types are nouns in the past tense: `user.registered`, `follow.created`.
public protocol EventPayload: Codable, Sendable {
    static var eventType: String { get }
    static var version: Int { get }
}

extension EventPayload {
    public static var version: Int { 1 }
}
