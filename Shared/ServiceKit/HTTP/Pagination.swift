import Foundation
import Hummingbird
import Models
import ServiceKitCore

/// `?limit=&cursor=` of a list request. Cursors are opaque to clients: base64url JSON of the sort key
/// of the last item returned, so that a page is stable under inserts.
public struct PageRequest: Sendable {
    public static let defaultLimit = 20
    package static let maxLimit = 100

    public var limit: Int
    package var cursor: String?

    public init(limit: Int = PageRequest.defaultLimit, cursor: String? = nil) {
        self.limit = limit
        self.cursor = cursor
    }

    /// Reads and checks `limit` (1…100, default 20) and `cursor` from the query.
    public init(query: Request) throws {
        let parameters = query.uri.queryParameters
        var limit = Self.defaultLimit
        if let text = parameters["limit"] {
            guard let value = Int(text), (1...Self.maxLimit).contains(value) else {
                throw APIError.validation([.init(field: "limit", message: "must be a whole number from 1 to \(Self.maxLimit)")])
            }
            limit = value
        }
        let cursor = parameters["cursor"].map(String.init)
        self.init(limit: limit, cursor: cursor?.isEmpty == true ? nil : cursor)
    }

    /// Decodes the cursor into the sort key type; a cursor that was not made by `Cursor.encode` is
    /// `400 invalid_cursor`. A cursor is client input: `Cursor.decode` refuses what would not fit the
    /// queries it ends up in (an out-of-range date, an overlong text).
    public func position<Key: Codable>(_: Key.Type) throws -> Key? {
        guard let cursor else { return nil }
        guard let key = Cursor.decode(Key.self, from: cursor) else {
            throw APIError(
                .badRequest, code: "invalid_cursor", detail: "The cursor is invalid or expired; start from the first page.",
                errors: [.init(field: "cursor", message: "is not a cursor this list returned")])
        }
        return key
    }
}

/// Encodes and decodes opaque cursors.
public enum Cursor {
    // Mapped to base64url byte by byte: three `replacingOccurrences` (through NSString) were a
    // twentieth of a notifications page's CPU. The JSON stays Foundation's, whose dates (seconds as a
    // number) the decoder below reads back exactly.
    public static func encode<Key: Encodable>(_ key: Key) -> String {
        let base64 = ((try? JSONEncoder().encode(key)) ?? Data()).base64EncodedString()
        var url: [UInt8] = []
        url.reserveCapacity(base64.utf8.count)
        for byte in base64.utf8 {
            switch byte {
            case UInt8(ascii: "+"): url.append(UInt8(ascii: "-"))
            case UInt8(ascii: "/"): url.append(UInt8(ascii: "_"))
            case UInt8(ascii: "="): break
            default: url.append(byte)
            }
        }
        return String(decoding: url, as: UTF8.self)
    }

    /// The longest cursor read: the keys are a date or a number, an id, and at most a short text.
    public static let maxLength = 1_024

    /// Dates within years 1 to 9999, as PostgreSQL's timestamps and the arithmetic on them hold:
    /// seconds since 2001 within ±3.2e11 (Foundation's JSON writes a date as that number).
    static let dateRange: ClosedRange<Double> = -63_113_904_000...252_423_993_599

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let seconds = try container.decode(Double.self)
            guard seconds.isFinite, dateRange.contains(seconds) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "a date out of range")
            }
            // The date as read from PostgreSQL, bound again at the microsecond it was read at: bound as
            // the `Double` came, about half of them fell a microsecond short, and a page after a
            // row's time skipped the rows sharing that time with a lower id.
            return RFC3339.atMicrosecond(Date(timeIntervalSinceReferenceDate: seconds))
        }
        return decoder
    }()

    public static func decode<Key: Decodable>(_: Key.Type, from cursor: String) -> Key? {
        guard cursor.utf8.count <= maxLength else { return nil }
        var base64: [UInt8] = []
        base64.reserveCapacity(cursor.utf8.count + 3)
        for byte in cursor.utf8 {
            switch byte {
            case UInt8(ascii: "-"): base64.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): base64.append(UInt8(ascii: "/"))
            default: base64.append(byte)
            }
        }
        while base64.count % 4 != 0 { base64.append(UInt8(ascii: "=")) }
        guard let data = Data(base64Encoded: Data(base64)) else { return nil }
        return try? decoder.decode(Key.self, from: data)
    }

    /// Builds a page from `limit + 1` fetched rows: the extra row only says that there is a next page.
    public static func page<Row, Key: Encodable>(_ rows: [Row], limit: Int, key: (Row) -> Key) -> (items: [Row], nextCursor: String?) {
        guard rows.count > limit else { return (rows, nil) }
        let items = Array(rows.prefix(limit))
        return (items, items.last.map { encode(key($0)) })
    }
}

/// A page is a response body like any other.
extension Page: ResponseGenerator where Item: Encodable {}
extension Page: ResponseEncodable where Item: Encodable {}
