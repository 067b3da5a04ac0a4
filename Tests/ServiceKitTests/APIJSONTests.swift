import Foundation
import Hummingbird
import HummingbirdTesting
@testable import Models
import NIOCore
import PostgresNIO
@testable import ServiceKit
@testable import ServiceKitCore
@testable import ServiceKitDatabase
@testable import ServiceKitEvents
@testable import ServiceKitHTTP
@testable import ServiceKitRedis
@testable import ServiceKitTokens
import Testing
import TestSupport

/// `APIJSON` is `JSONEncoder.api` with its UUIDs lowercased: byte for byte what Foundation writes
/// otherwise, for every kind of value.
@Suite struct APIJSONTests {
    struct Inner: Codable, Equatable {
        var zeta = 1
        var alpha: String? = "a"
        var middle: [Int] = [3, 2, 1]
    }

    /// Keys declared out of order, optionals left out and written as null, every special type.
    struct Everything: Codable {
        var name = "plain"
        var escaped = "quote \" backslash \\ slash / tab \t newline \n return \r bell \u{7} unit \u{1F} backspace \u{8} feed \u{C} del \u{7F}"
        var unicode = "é ü 中文 🍜 \u{2028} \u{2029}"
        var empty = ""
        var id = UUID()
        var ids = [UUID(), UUID()]
        var date = Date(timeIntervalSince1970: 1_795_000_000.123)
        var dates: [Date] = [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 1_700_000_000.5)]
        var data = Data([0, 1, 2, 250, 251, 252, 253, 254, 255])
        var url = URL(string: "https://example.com/a/b?c=d&e=%20")!
        var decimal = Decimal(string: "1234.5678")!
        var integers: [Int] = [0, 1, -1, 42, Int.max, Int.min]
        var int8: Int8 = -128
        var int16: Int16 = 32_767
        var int32: Int32 = -2_147_483_648
        var int64: Int64 = 9_007_199_254_740_993
        var uint: UInt = UInt.max
        var uint8: UInt8 = 255
        var uint32: UInt32 = 4_294_967_295
        var uint64: UInt64 = UInt64.max
        var doubles: [Double] = [0, -0.0, 1, -1, 1.5, 0.1, -0.25, 1e20, 1e21, 1e-7, 123_456_789.125, 3.141592653589793, Double.leastNonzeroMagnitude, Double.greatestFiniteMagnitude]
        var floats: [Float] = [0, 1, 0.1, 1e-3, 3.4e38]
        var yes = true
        var no = false
        var missing: String? = nil
        var present: Int? = 7
        var nested = Inner()
        var nestedList = [Inner(), Inner(zeta: 2, alpha: nil, middle: [])]
        var matrix: [[Int]] = [[1, 2], [], [3]]
        var dictionary: [String: Int] = ["b": 2, "a": 1, "c": 3, "aa": 4, "B": 5, "a_b": 6, "a b": 7, "": 8, "a!": 9, "a#": 10, "a\u{1}": 11]
        var intKeys: [Int: String] = [3: "c", 1: "a", 20: "t"]
        var json: JSONValue = .object(["z": .array([.null, .bool(true), .number(1), .number(2.5), .string("s")]), "a": .object([:]), "m": .array([])])
        var emptyList: [String] = []
        var emptyMap: [String: String] = [:]
        var nothing = Nothing()

        enum CodingKeys: String, CodingKey {
            case name, escaped, unicode, empty, id, ids, date, dates, data, url, decimal, integers, int8, int16, int32, int64, uint, uint8, uint32, uint64
            case doubles, floats, yes, no, missing, present = "present_value", nested, nestedList = "nested_list", matrix, dictionary, intKeys = "int_keys"
            case json, emptyList = "empty_list", emptyMap = "empty_map", nothing
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            // Written in reverse order of the keys' names, so that the writer must sort them.
            try container.encode(yes, forKey: .yes)
            try container.encode(url, forKey: .url)
            try container.encode(unicode, forKey: .unicode)
            try container.encode(uint64, forKey: .uint64)
            try container.encode(uint32, forKey: .uint32)
            try container.encode(uint8, forKey: .uint8)
            try container.encode(uint, forKey: .uint)
            try container.encodeIfPresent(present, forKey: .present)
            try container.encode(nothing, forKey: .nothing)
            try container.encode(no, forKey: .no)
            try container.encode(nestedList, forKey: .nestedList)
            try container.encode(nested, forKey: .nested)
            try container.encode(name, forKey: .name)
            try container.encodeIfPresent(missing, forKey: .missing)
            try container.encode(matrix, forKey: .matrix)
            try container.encode(json, forKey: .json)
            try container.encode(intKeys, forKey: .intKeys)
            try container.encode(integers, forKey: .integers)
            try container.encode(int8, forKey: .int8)
            try container.encode(int64, forKey: .int64)
            try container.encode(int32, forKey: .int32)
            try container.encode(int16, forKey: .int16)
            try container.encode(ids, forKey: .ids)
            try container.encode(id, forKey: .id)
            try container.encode(floats, forKey: .floats)
            try container.encode(escaped, forKey: .escaped)
            try container.encode(emptyMap, forKey: .emptyMap)
            try container.encode(emptyList, forKey: .emptyList)
            try container.encode(empty, forKey: .empty)
            try container.encode(doubles, forKey: .doubles)
            try container.encode(dictionary, forKey: .dictionary)
            try container.encode(decimal, forKey: .decimal)
            try container.encode(dates, forKey: .dates)
            try container.encode(date, forKey: .date)
            try container.encode(data, forKey: .data)
            try container.encodeNil(forKey: .missing)
        }
    }

    /// Every kind of optional, through the synthesized `encodeIfPresent` calls: present ones written,
    /// missing ones left out.
    struct Optionals: Codable {
        var text: String?
        var flag: Bool?
        var count: Int?
        var ratio: Double?
        var small: Int32?
        var id: UUID?
        var when: Date?
        var list: [String]?
        var inner: Inner?

        static let full = Optionals(text: "t", flag: false, count: -4, ratio: 2.5, small: 7, id: UUID(), when: Date(timeIntervalSince1970: 1_795_000_000.25), list: ["a", "b"], inner: Inner())
        static let empty = Optionals()
    }

    /// Encodes nothing at all: an empty object, as with JSONEncoder.
    struct Nothing: Codable {
        func encode(to encoder: any Encoder) throws {}
    }

    /// Asks for its container twice and uses nested containers properly.
    struct Twice: Encodable {
        enum Keys: String, CodingKey { case b, a, list, inner }
        func encode(to encoder: any Encoder) throws {
            var first = encoder.container(keyedBy: Keys.self)
            try first.encode(2, forKey: .b)
            var second = encoder.container(keyedBy: Keys.self)
            try second.encode(1, forKey: .a)
            var inner = second.nestedContainer(keyedBy: Keys.self, forKey: .inner)
            try inner.encode("x", forKey: .b)
            try inner.encode("y", forKey: .a)
            var list = second.nestedUnkeyedContainer(forKey: .list)
            try list.encode(1)
            var row = list.nestedContainer(keyedBy: Keys.self)
            try row.encode(true, forKey: .b)
            try list.encodeNil()
        }
    }

    /// Goes back to its own container after filling a nested one: written as JSONEncoder writes it.
    struct Interleaved: Encodable {
        enum Keys: String, CodingKey { case first, later, inner }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            var inner = container.nestedContainer(keyedBy: Keys.self, forKey: .inner)
            try container.encode(1, forKey: .first)
            try inner.encode(2, forKey: .later)
        }
    }

    /// Catches a value's error and goes on.
    struct Swallowed: Encodable {
        enum Keys: String, CodingKey { case a, b }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try? container.encode([Double.nan], forKey: .a)
            try container.encode(1, forKey: .b)
        }
    }

    /// Writes one key twice.
    struct Twice2: Encodable {
        enum Keys: String, CodingKey { case a }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(1, forKey: .a)
            try container.encode(2, forKey: .a)
        }
    }

    /// A single value, then a keyed container, for one value.
    struct Mixed: Encodable {
        enum Keys: String, CodingKey { case b }
        func encode(to encoder: any Encoder) throws {
            var single = encoder.singleValueContainer()
            try single.encode(["a": 1])
            var keyed = encoder.container(keyedBy: Keys.self)
            try keyed.encode(2, forKey: .b)
        }
    }

    /// What Foundation's `JSONEncoder.api` writes, with its UUIDs lowercased: the one way `APIJSON`
    /// differs from it on purpose.
    static func foundation(_ value: some Encodable) throws -> String {
        TestSupport.lowercasingUUIDs(String(decoding: try JSONEncoder.api.encode(value), as: UTF8.self))
    }

    /// Identifiers in JSON are lowercase UUIDs (RFC 9562 §4), in every answer the kit writes: a route's
    /// value, a problem, and the ids in an access token's claims.
    @Test func identifiersAreLowercaseUUIDs() async throws {
        struct Thing: Codable, ResponseEncodable { var id: UUID; var ids: [UUID]; var owner: UUID? }
        let id = UUID()
        let router = Router(context: ServiceRequestContext.self)
        router.get("thing") { _, _ in Thing(id: id, ids: [id, id], owner: id) }
        try await Application(router: router).test(.router) { client in
            let text = String(buffer: try await client.execute(uri: "/thing", method: .get).body)
            #expect(text == #"{"id":"\#(id.uuidString.lowercased())","ids":["\#(id.uuidString.lowercased())","\#(id.uuidString.lowercased())"],"owner":"\#(id.uuidString.lowercased())"}"#)
            #expect(text.range(of: "[A-F]", options: .regularExpression) == nil)
        }
        let claims = AccessTokenClaims(userID: id, sessionID: id, roles: [.user], emailVerified: true, issuer: "i", audience: "a", issuedAt: Date(), expiresAt: Date())
        #expect(claims.sub.value == id.uuidString.lowercased() && claims.sid == id.uuidString.lowercased())
    }

    static func fast(_ value: some Encodable) throws -> String {
        String(decoding: try APIJSON.encode(value), as: UTF8.self)
    }

    @Test func everyKindOfValueIsWrittenAsJSONEncoderWritesIt() throws {
        for _ in 0..<20 {
            let value = Everything()
            #expect(try Self.fast(value) == Self.foundation(value))
        }
        for value in [Inner(), Inner(zeta: -3, alpha: nil, middle: [])] {
            #expect(try Self.fast(value) == Self.foundation(value))
        }
        #expect(try Self.fast(Twice()) == Self.foundation(Twice()))
        #expect(try Self.fast([Inner()]) == Self.foundation([Inner()]))
        #expect(try Self.fast(["k": [Inner()]]) == Self.foundation(["k": [Inner()]]))
        #expect(try Self.fast("top-level string") == Self.foundation("top-level string"))
        #expect(try Self.fast(42) == Self.foundation(42))
        // Nothing at the top is refused by both; inside a value it is `{}` (above).
        #expect(throws: EncodingError.self) { try Self.foundation(Nothing()) }
        #expect(throws: EncodingError.self) { try Self.fast(Nothing()) }
        #expect(try Self.fast(Page(items: [Inner()], nextCursor: "abc")) == Self.foundation(Page(items: [Inner()], nextCursor: "abc")))
        #expect(try Self.fast(Page<Inner>(items: [], nextCursor: nil)) == Self.foundation(Page<Inner>(items: [], nextCursor: nil)))
    }

    @Test func optionalsAreWrittenOrLeftOutAsJSONEncoderDoes() throws {
        for value in [Optionals.full, Optionals.empty, Optionals(text: "only"), Optionals(flag: true, when: Date(timeIntervalSince1970: 0))] {
            #expect(try Self.fast(value) == Self.foundation(value))
        }
        #expect(try Self.fast(Optionals.empty) == "{}")
    }

    /// Dates are written without Foundation's formatter from 1600 through 9999: Foundation's calendar
    /// and clock, and the milliseconds of the instant taken to the microsecond.
    @Test func datesAreWrittenAsFoundationWritesThem() throws {
        var generator = SeededRandom("datesAreWrittenAsFoundationWritesThem")
        // Whole seconds anywhere in the range: the calendar and the clock, as Foundation writes them.
        var seconds: [Double] = [0, -1, 1, -978_307_200, -12_654_403_200, 252_423_993_599]
        for _ in 0..<3000 { seconds.append(Double(Int64.random(in: -12_654_403_200..<252_423_993_600, using: &generator))) }
        for second in seconds {
            let date = Date(timeIntervalSinceReferenceDate: second)
            #expect(RFC3339.fastString(from: date) != nil && RFC3339.string(from: date) == RFC3339.foundationString(from: date), "\(second)")
        }
        // Outside it, Foundation's text.
        for interval in [-12_654_403_200.5, -13_000_000_000, 252_423_993_600] {
            let date = Date(timeIntervalSinceReferenceDate: interval)
            #expect(RFC3339.fastString(from: date) == nil && RFC3339.string(from: date) == RFC3339.foundationString(from: date), "\(interval)")
        }
        // Times as PostgreSQL hands them over: microseconds since 2000 through PostgresNIO's codec, in
        // the years a `Double` holds to well within a microsecond (some 68 either side of 2000), each
        // written with its own milliseconds, every millisecond of one second among them.
        var microseconds: [Int64] = (0..<1000).map { 848_230_200_000_000 + Int64($0) * 1000 }
        for _ in 0..<5000 { microseconds.append(Int64.random(in: -2_147_000_000_000_000..<2_147_000_000_000_000, using: &generator)) }
        for _ in 0..<1000 { microseconds.append(Int64.random(in: -2_147_000_000..<2_147_000_000, using: &generator) * 1_000_000 + 999_999) }
        for stored in microseconds {
            var buffer = ByteBuffer()
            buffer.writeInteger(stored)
            let date = try Date(from: &buffer, type: .timestamptz, format: .binary, context: .default)
            let (second, fraction) = stored.quotientAndRemainder(dividingBy: 1_000_000)
            let (wholeSecond, micro) = fraction < 0 ? (second - 1, fraction + 1_000_000) : (second, fraction)
            let clock = RFC3339.foundationString(from: Date(timeIntervalSince1970: 946_684_800 + Double(wholeSecond))).dropLast(4)
            #expect(RFC3339.string(from: date) == clock + String(format: "%03dZ", micro / 1000), "\(stored)")
        }
        // A `Date` finer than PostgreSQL: its microsecond's milliseconds.
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: 1_795_000_000.123_4)) == "2026-11-18T11:06:40.123Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: 1_795_000_000.123_999_4)) == "2026-11-18T11:06:40.123Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: 1_795_000_000.999_999_7)) == "2026-11-18T11:06:41.000Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: 1_795_000_000)) == "2026-11-18T11:06:40.000Z")
    }

    /// A time an app sends is bound to PostgreSQL at its own microsecond (PostgresNIO's codec cuts a
    /// `Date`'s microseconds), through the routes' parser and the bodies' decoder alike: to the
    /// millisecond or the microsecond, in any offset, from 1950 to 2060.
    @Test func aTimeSentIsStoredAtItsMicrosecond() throws {
        var generator = SeededRandom("aTimeSentIsStoredAtItsMicrosecond")
        struct Body: Decodable { var at: Date }
        for n in 0..<6000 {
            let second = Int64.random(in: -1_577_836_800..<1_893_456_000, using: &generator)  // since 2000
            let micro = n % 2 == 0 ? Int64.random(in: 0..<1000, using: &generator) * 1000 : Int64.random(in: 0..<1_000_000, using: &generator)
            let offset = [0, 19_800, -28_800, 3_600][n % 4]
            let clock = RFC3339.foundationString(from: Date(timeIntervalSince1970: 946_684_800 + Double(second + Int64(offset)))).dropLast(5)
            let fraction = n % 2 == 0 ? String(format: "%03d", micro / 1000) : String(format: "%06d", micro)
            let zone = offset == 0 ? "Z" : String(format: "%@%02d:%02d", offset < 0 ? "-" : "+", abs(offset) / 3600, abs(offset) % 3600 / 60)
            let text = "\(clock).\(fraction)\(zone)"
            let parsed = try #require(RFC3339.strictDate(from: text), "\(text)")
            let decoded = try JSONDecoder.api.decode(Body.self, from: Data("{\"at\":\"\(text)\"}".utf8)).at
            for date in [parsed, decoded] {
                var buffer = ByteBuffer()
                date.encode(into: &buffer, context: PostgresEncodingContext.default)
                #expect(buffer.readInteger(as: Int64.self) == second * 1_000_000 + micro, "\(text)")
            }
        }
    }

    /// A fraction of more than six digits is cut at the microsecond, not rounded into the next day;
    /// a date beyond the years a `Double` holds to the microsecond is left as parsed.
    @Test func aTimeIsReadToTheMicrosecondCut() throws {
        let last = try #require(RFC3339.strictDate(from: "2026-03-01T23:59:59.9999996+01:00"))
        #expect(RFC3339.string(from: last) == "2026-03-01T22:59:59.999Z")
        var buffer = ByteBuffer()
        last.encode(into: &buffer, context: PostgresEncodingContext.default)
        #expect(buffer.readInteger(as: Int64.self) == 825_721_199_999_999)
        #expect(RFC3339.fractionCut("2026-03-01T07:30:00.123456789Z") == "2026-03-01T07:30:00.123456Z")
        #expect(RFC3339.fractionCut("2026-03-01T07:30:00.1234567+01:00") == "2026-03-01T07:30:00.123456+01:00")
        #expect(RFC3339.fractionCut("2026-03-01T07:30:00.123456Z") == "2026-03-01T07:30:00.123456Z")
        struct Body: Decodable { var at: Date }
        let decoded = try JSONDecoder.api.decode(Body.self, from: Data(#"{"at":"2026-03-01T23:59:59.999999999Z"}"#.utf8)).at
        #expect(RFC3339.string(from: decoded) == "2026-03-01T23:59:59.999Z")
        for text in ["1650-06-15T12:00:00.123Z", "1750-06-15T12:00:00.123Z", "2250-06-15T12:00:00.123Z", "9000-06-15T12:00:00.123Z"] {
            let parsed = try #require(RFC3339.strictDate(from: text))
            let foundation = try Date.ISO8601FormatStyle().parse(text)
            #expect(abs(parsed.timeIntervalSince(foundation)) < 0.000_002, "\(text)")
        }
    }

    /// The routes' date-times: RFC 3339's shape with its offset, or nothing; the value as
    /// Foundation's ISO8601DateFormatter reads the same text.
    @Test func strictDatesTakeRFC3339AndNothingElse() throws {
        let reference = ISO8601DateFormatter()
        reference.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for text in [
            "2026-03-01T07:30:00+01:00", "2026-03-01T07:30:00Z", "2026-03-01T07:30:00z", "2026-03-01T07:30:00.5-09:30", "2026-03-01T07:30:00.123456789Z",
            "2026-03-01t07:30:00z", "2026-03-01t07:30:00.25+01:00", "2024-02-29T07:30:00Z", "2000-02-29T07:30:00Z", "2026-12-31T07:30:00+14:00",
        ] {
            let date = try #require(RFC3339.strictDate(from: text), "\(text)")
            // RFC 3339 takes `t` and `z` in either case (its section 5.6).
            let upper = text.uppercased()
            let withFraction = upper.contains(".") ? upper : upper.replacingOccurrences(of: ":00", with: ":00.000", options: [], range: upper.range(of: "07:30:00"))
            let expected = try #require(reference.date(from: withFraction), "\(withFraction)")
            #expect(abs(date.timeIntervalSince(expected)) < 0.001, "\(text)")
        }
        for text in [
            "2026-03-01T07:30:00", "2026-03-01T07:30:00+0100", "2026-03-01 07:30:00Z", "2026-03-01T07:30Z", "2026-3-01T07:30:00Z", "2026-03-01T07:30:00.Z",
            "2026-03-01T07:30:00.1234567890Z", "2026-03-01T07:30:00+01:00x", "2026-03-01T07:30:00+01", "", "2026-03-01", "２０２６-03-01T07:30:00Z",
            "2026-13-01T07:30:00Z", "2026-02-30T07:30:00Z", "2026-02-29T07:30:00Z", "2026-04-31T07:30:00Z", "2026-00-10T07:30:00Z",
            "2026-03-00T07:30:00Z", "2026-03-01T24:00:00Z", "2026-03-01T07:60:00Z", "2026-03-01T07:30:60Z", "2026-03-01T07:30:00+24:00",
            "2026-03-01T07:30:00+01:60", "1900-02-29T07:30:00Z", "2026-03-01x07:30:00Z",
        ] {
            #expect(RFC3339.strictDate(from: text) == nil, "\(text)")
            // A JSON body's date is read the same way: Foundation's parser alone would take
            // 30 February for 2 March.
            #expect(throws: DecodingError.self, "\(text)") { try JSONDecoder.api.decode([Date].self, from: Data(#"["\#(text)"]"#.utf8)) }
        }
    }

    /// Random trees of JSON values with random keys, compared byte for byte.
    @Test func randomDocumentsMatchJSONEncoder() throws {
        var generator = SeededRandom("randomDocumentsMatchJSONEncoder")
        func randomString() -> String {
            let alphabet = Array("abcxyzABC_ -09é\"\\/\n\u{1}")
            return String((0..<Int.random(in: 0...8, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! })
        }
        func randomValue(_ depth: Int) -> JSONValue {
            switch Int.random(in: depth > 3 ? 0...3 : 0...5, using: &generator) {
            case 0: return .null
            case 1: return .bool(Bool.random(using: &generator))
            case 2: return Bool.random(using: &generator) ? .number(Double(Int.random(in: -1000...1000, using: &generator))) : .number(Double.random(in: -1e6...1e6, using: &generator))
            case 3: return .string(randomString())
            case 4: return .array((0..<Int.random(in: 0...5, using: &generator)).map { _ in randomValue(depth + 1) })
            default:
                var object: [String: JSONValue] = [:]
                for _ in 0..<Int.random(in: 0...6, using: &generator) {
                    object[randomString().replacingOccurrences(of: "\"", with: "").replacingOccurrences(of: "\\", with: "")] = randomValue(depth + 1)
                }
                return .object(object)
            }
        }
        for _ in 0..<300 {
            let value = randomValue(0)
            let fast = try Self.fast(value), foundation = try Self.foundation(value)
            #expect(fast == foundation, "seed \(generator.seed)")
            if fast != foundation { break }
        }
    }

    @Test func unusualEncodersAreWrittenAsJSONEncoderWritesThem() async throws {
        for value in [Interleaved() as any Encodable, Swallowed(), Twice2()] {
            #expect(try Self.fast(value) == Self.foundation(value), "\(type(of: value))")
        }
        // A UUID-shaped string is taken for a UUID; other strings keep their case.
        #expect(try Self.fast(["A1B2C3D4-0000-4000-8000-00000000000F", "ABC"]) == #"["a1b2c3d4-0000-4000-8000-00000000000f","ABC"]"#)
        // Text inside a longer string is not taken for one, though a quote (escaped) is before it.
        #expect(try Self.fast(["x\"A1B2C3D4-0000-4000-8000-00000000000F\""]) == #"["x\"A1B2C3D4-0000-4000-8000-00000000000F\""]"#)
        #expect(try Self.fast(["k": "A1B2C3D4-0000-4000-8000-00000000000F"]) == #"{"k":"a1b2c3d4-0000-4000-8000-00000000000f"}"#)
        let kept = try APIJSON.encode(["A1B2C3D4-0000-4000-8000-00000000000F", "B1B2C3D4-0000-4000-8000-00000000000F"], keeping: "B1B2C3D4-0000-4000-8000-00000000000F")
        #expect(String(decoding: kept, as: UTF8.self) == #"["a1b2c3d4-0000-4000-8000-00000000000f","B1B2C3D4-0000-4000-8000-00000000000F"]"#)
        #expect(try Self.fast([Int128.max, Int128.min]) == Self.foundation([Int128.max, Int128.min]))
        #expect(try Self.fast(["u": UInt128.max]) == Self.foundation(["u": UInt128.max]))
        #expect(throws: EncodingError.self) { try APIJSON.encode([Double.nan]) }
        let router = Router(context: ServiceRequestContext.self)
        router.get("interleaved") { _, _ in Interleaved() }
        router.get("inner") { _, _ in Inner() }
        router.get("swallowed") { _, _ in Swallowed() }
        try await Application(router: router).test(.router) { client in
            let interleaved = try await client.execute(uri: "/interleaved", method: .get)
            #expect(interleaved.status == .ok)
            #expect(String(buffer: interleaved.body) == (try Self.foundation(Interleaved())))
            let swallowed = try await client.execute(uri: "/swallowed", method: .get)
            #expect(String(buffer: swallowed.body) == (try Self.foundation(Swallowed())))
            let inner = try await client.execute(uri: "/inner", method: .get)
            #expect(String(buffer: inner.body) == (try Self.foundation(Inner())))
            #expect(inner.headers[.contentType] == "application/json; charset=utf-8")
            #expect(inner.headers[.cacheControl] == "no-store")
        }
    }
}

extension APIJSONTests.Interleaved: ResponseEncodable {}
extension APIJSONTests.Inner: ResponseEncodable {}
extension APIJSONTests.Swallowed: ResponseEncodable {}
