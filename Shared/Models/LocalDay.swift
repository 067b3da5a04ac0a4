import Foundation

/// A day on someone's calendar, `YYYY-MM-DD`: the day a diary entry counts for, a session is
/// scheduled on. Every service reads a day from a request through `init?(_ text:)`, so they all
/// take and refuse the same texts, and PostgreSQL's `date` takes each one they take.
public struct LocalDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int

    public init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }

    /// The day a moment counts for in `zone`, where a day starts at `dayStartsAt` o'clock (a night
    /// owl's 01:30 snack counts for the evening before).
    public init(_ moment: Date, in zone: TimeZone, dayStartsAt: Int) {
        // The wall-clock time there, shifted back by the day's start hour: 01:30 with days starting
        // at 02 is 23:30 of the day before.
        let local = moment.timeIntervalSince1970 + Double(zone.secondsFromGMT(for: moment) - dayStartsAt * 3600)
        self.init(dayNumber: Int((local / 86_400).rounded(.down)))
    }

    /// `YYYY-MM-DD`, as PostgreSQL's `date` reads and writes it, from 1900 (PostgreSQL has no year 0,
    /// and no diary goes back further).
    public init?(_ text: String) {
        // ASCII digits only: `Int` would take "+1" for a month, which PostgreSQL's date does not.
        guard text.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]), year >= 1900,
            (1...12).contains(month), (1...Self.daysIn(month: month, year: year)).contains(day)
        else { return nil }
        self.init(year: year, month: month, day: day)
    }

    public static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    public var description: String {
        let y = String(year), m = String(month), d = String(day)
        return String(repeating: "0", count: max(0, 4 - y.count)) + y + "-" + (m.count < 2 ? "0" : "") + m + "-" + (d.count < 2 ? "0" : "") + d
    }

    /// Days since 1970-01-01 (the proleptic Gregorian calendar, Howard Hinnant's `days_from_civil`):
    /// day arithmetic without building a `Calendar`, which costs more than the rest of a trend.
    public var dayNumber: Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The day `dayNumber` days after 1970-01-01 (Hinnant's `civil_from_days`).
    public init(dayNumber: Int) {
        let z = dayNumber + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        self.init(year: yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month: month, day: day)
    }

    /// The day `days` after this one (before, when negative).
    public func adding(days: Int) -> LocalDay { LocalDay(dayNumber: dayNumber + days) }

    /// The ISO weekday: 1 for Monday through 7 for Sunday (1970-01-01, day 0, was a Thursday).
    public var isoWeekday: Int { ((dayNumber + 3) % 7 + 7) % 7 + 1 }

    /// Whole days from this one to `other`.
    public func distance(to other: LocalDay) -> Int { other.dayNumber - dayNumber }

    public static func < (lhs: LocalDay, rhs: LocalDay) -> Bool { (lhs.year, lhs.month, lhs.day) < (rhs.year, rhs.month, rhs.day) }
}
