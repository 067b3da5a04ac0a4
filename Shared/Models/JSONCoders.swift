import Foundation

extension JSONEncoder {
    /// The wire format of the whole backend: snake_case keys are spelled by `CodingKeys`, dates are RFC 3339 UTC.
    /// One instance for the process (encoding is thread-safe); never change its options.
    public static let api: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.string(from: date))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
}

extension JSONDecoder {
    /// Reads RFC 3339 date-times, with or without fractional seconds, and nothing else
    /// (`RFC3339.strictDate`): a request's `2026-02-30T12:00:00Z` is refused naming its field, not
    /// taken for 2 March. One instance for the process (decoding is thread-safe); never change its
    /// options.
    public static let api: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = RFC3339.strictDate(from: text) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "expected an RFC 3339 date-time with its offset, like 2026-03-01T07:30:00+01:00")
            }
            return date
        }
        return decoder
    }()
}

/// RFC 3339 in UTC with milliseconds, the one date format on the wire.
package enum RFC3339 {
    /// `2026-11-25T01:11:56.123Z`: the instant to the microsecond, then its milliseconds cut (not
    /// rounded) toward the past. PostgreSQL keeps microseconds, and a `Date` read from a
    /// `timestamptz` is a `Double` within a fraction of a microsecond of the stored value, as often
    /// below it as above: cutting the `Double` itself wrote `.122` for about half of the times stored
    /// at `.123000` (an app's `performed_at` of `.123` read back a millisecond early). Written here
    /// for the dates of 1600 through 9999 (Foundation's style cost about 5,000 instructions a date,
    /// two per profile read); the rest go to Foundation (its calendar is Julian before 1582).
    package static func string(from date: Date) -> String {
        fastString(from: date) ?? foundationString(from: date)
    }

    static func foundationString(from date: Date) -> String {
        date.formatted(.iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: true).timeSeparator(.colon).timeZone(separator: .omitted))
    }

    /// 1600-01-01 and 10000-01-01, in seconds since 2001-01-01 (`Date`'s own reference).
    private static let fastRange: Range<Double> = -12_654_403_200..<252_423_993_600

    static func fastString(from date: Date) -> String? {
        let interval = date.timeIntervalSinceReferenceDate
        guard fastRange.contains(interval) else { return nil }
        var whole = interval.rounded(.down)
        // The nearest microsecond of the fraction (`interval - whole` is exact but in the second
        // before 2001, where it is off by far less than a microsecond).
        var microseconds = Int(((interval - whole) * 1_000_000).rounded())
        if microseconds == 1_000_000 { (whole, microseconds) = (whole + 1, 0) }
        guard fastRange.contains(whole) else { return nil }
        let cut = microseconds / 1000
        let seconds = Int(whole) + 978_307_200  // since 1970-01-01
        let (days, secondOfDay) = seconds.quotientAndRemainder(dividingBy: 86_400)
        let (dayNumber, daySecond) = secondOfDay < 0 ? (days - 1, secondOfDay + 86_400) : (days, secondOfDay)
        let civil = LocalDay(dayNumber: dayNumber)
        let (year, month, day) = (civil.year, civil.month, civil.day)
        var text = [UInt8]()
        text.reserveCapacity(24)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor > 0 {
                text.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(year, 4); text.append(UInt8(ascii: "-")); digits(month, 2); text.append(UInt8(ascii: "-")); digits(day, 2)
        text.append(UInt8(ascii: "T"))
        digits(daySecond / 3600, 2); text.append(UInt8(ascii: ":")); digits(daySecond / 60 % 60, 2); text.append(UInt8(ascii: ":")); digits(daySecond % 60, 2)
        text.append(UInt8(ascii: ".")); digits(Int(cut), 3); text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    /// A date-time as the API takes one, in a JSON body (`JSONDecoder.api`) or a form: RFC 3339's
    /// shape (`2026-03-01T07:30:00+01:00`, an optional fraction of up to nine digits, the offset `Z`
    /// or `±hh:mm` required, `T` and `Z` in either case as RFC 3339 allows; a day the calendar has, a
    /// time before 24:00, no leap second), checked
    /// here because Foundation's ISO 8601 parser also takes forms RFC 3339 does not (`+0100`) and
    /// rolls a day the month lacks over into the next; the value is Foundation's. Neither builds a
    /// formatter per call, as `ISO8601DateFormatter` and a regex literal do.
    package static func strictDate(from text: String) -> Date? {
        guard hasShape(text) else { return nil }
        return (try? Date.ISO8601FormatStyle().parse(fractionCut(upperT(text)))).map(atMicrosecond)
    }

    /// The text with a lowercase `t` between date and time made `T`, the one Foundation's parser takes.
    static func upperT(_ text: String) -> String {
        var bytes = Array(text.utf8)
        guard bytes.count > 10, bytes[10] == UInt8(ascii: "t") else { return text }
        bytes[10] = UInt8(ascii: "T")
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The text with its fraction of a second cut after the microseconds, PostgreSQL's precision:
    /// `23:59:59.9999996` is still that day's last microsecond, not the next day's first.
    static func fractionCut(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard bytes.count > 26, bytes[19] == UInt8(ascii: "."), bytes[20..<27].allSatisfy({ (0x30...0x39).contains($0) }) else { return text }
        var end = 27
        while end < bytes.count, (0x30...0x39).contains(bytes[end]) { end += 1 }
        return String(decoding: bytes[..<26] + bytes[end...], as: UTF8.self)
    }

    /// 2000-01-01T00:00:00Z, PostgreSQL's epoch, in seconds since `Date`'s reference date.
    private static let postgresEpoch = -31_622_400.0

    /// A date at its nearest microsecond as PostgreSQL will keep it. PostgresNIO binds a `Date` as
    /// its microseconds since 2000 cut toward zero, and a parsed `.123`, or a time read from
    /// PostgreSQL, often lies a hair below that decimal: it was stored as `.122999` and read back a
    /// millisecond early. This is the `Double` nearest that microsecond, moved by a unit in the last
    /// place until its microseconds, so cut, are that microsecond; beyond the decades in which a
    /// `Double` holds microseconds (some 140 years either side of 2000), the date as it was.
    package static func atMicrosecond(_ date: Date) -> Date {
        let microseconds = ((date.timeIntervalSinceReferenceDate - postgresEpoch) * 1_000_000).rounded()
        var interval = microseconds / 1_000_000 + postgresEpoch
        // A unit of the larger of the two values the binding's subtraction involves, so that each
        // step moves its result.
        let step = max((microseconds / 1_000_000).magnitude.ulp, interval.magnitude.ulp)
        for _ in 0..<4 {
            let bound = ((interval - postgresEpoch) * 1_000_000).rounded(.towardZero)
            if bound == microseconds { return Date(timeIntervalSinceReferenceDate: interval) }
            interval += bound < microseconds ? step : -step
        }
        return date
    }

    static func hasShape(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        func digits(_ range: Range<Int>) -> Bool { range.upperBound <= bytes.count && range.allSatisfy { (0x30...0x39).contains(bytes[$0]) } }
        func byte(_ index: Int, _ character: Character) -> Bool { index < bytes.count && bytes[index] == character.asciiValue }
        func number(_ range: Range<Int>) -> Int { range.reduce(0) { $0 * 10 + Int(bytes[$1] - 0x30) } }
        // yyyy-mm-ddThh:mm:ss
        guard digits(0..<4), byte(4, "-"), digits(5..<7), byte(7, "-"), digits(8..<10), byte(10, "T") || byte(10, "t"), digits(11..<13), byte(13, ":"), digits(14..<16),
            byte(16, ":"), digits(17..<19)
        else { return false }
        // A day the calendar has and a time of day: Foundation's parser rolls 30 February over to
        // March and takes 24:00, and the routes date records by the text's own day.
        let (year, month, day) = (number(0..<4), number(5..<7), number(8..<10))
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...12).contains(month), (1...monthDays[month - 1]).contains(day), number(11..<13) < 24, number(14..<16) < 60, number(17..<19) < 60
        else { return false }
        var index = 19
        if byte(index, ".") {
            var end = index + 1
            while end < bytes.count, (0x30...0x39).contains(bytes[end]) { end += 1 }
            guard (1...9).contains(end - index - 1) else { return false }
            index = end
        }
        if byte(index, "Z") || byte(index, "z") { return index + 1 == bytes.count }
        guard byte(index, "+") || byte(index, "-") else { return false }
        return digits(index + 1..<index + 3) && byte(index + 3, ":") && digits(index + 4..<index + 6) && index + 6 == bytes.count
            && number(index + 1..<index + 3) < 24 && number(index + 4..<index + 6) < 60
    }
}

/// A key named at run time: a limit's, a field's, one of an object the body sent.
public struct AnyKey: CodingKey, Sendable {
    public let stringValue: String
    public var intValue: Int? { nil }
    public init(_ name: String) { stringValue = name }
    public init(stringValue: String) { self.stringValue = stringValue }
    public init?(intValue: Int) { nil }
}

extension KeyedEncodingContainer {
    /// The value, or `null`, through the container's own overload for its type. The generic
    /// `encode(_:forKey:)` that an `Optional` otherwise takes makes Foundation's encoder try a
    /// dynamic cast per value, which dominates objects of many small optional numbers.
    public mutating func encodeOrNull(_ value: Int?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { try encodeNil(forKey: key) }
    }

    public mutating func encodeOrNull(_ value: Double?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { try encodeNil(forKey: key) }
    }

    public mutating func encodeOrNull(_ value: String?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { try encodeNil(forKey: key) }
    }
}
