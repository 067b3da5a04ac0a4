import Foundation

/// The day a moment counts for in someone's diary: its date in their time zone, where a day starts
/// at `dayStartsAt` o'clock (a night owl's 01:30 snack counts for the evening before). Found when a
/// meal is written and stored with it, so a later change of zone never moves past meals.
struct LocalDay: Sendable, Equatable, Comparable, CustomStringConvertible {
    var year: Int
    var month: Int
    var day: Int

    init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }

    init(_ moment: Date, in zone: TimeZone, dayStartsAt: Int) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        // The wall-clock time shifted back by the day's start hour: 01:30 with days starting at 02
        // is 23:30 of the day before.
        let shifted = calendar.date(byAdding: .hour, value: -dayStartsAt, to: moment) ?? moment
        let parts = calendar.dateComponents([.year, .month, .day], from: shifted)
        self.init(year: parts.year ?? 1970, month: parts.month ?? 1, day: parts.day ?? 1)
    }

    /// `YYYY-MM-DD`, as PostgreSQL's `date` reads and writes it.
    init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2])
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        guard let date = calendar.date(from: DateComponents(year: year, month: month, day: day)),
            calendar.dateComponents([.year, .month, .day], from: date) == DateComponents(year: year, month: month, day: day)
        else { return nil }
        self.init(year: year, month: month, day: day)
    }

    var description: String { String(format: "%04d-%02d-%02d", year, month, day) }

    /// The day `days` after this one (before, when negative).
    func adding(days: Int) -> LocalDay {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let date = calendar.date(from: DateComponents(year: year, month: month, day: day))!
        let moved = calendar.date(byAdding: .day, value: days, to: date)!
        let parts = calendar.dateComponents([.year, .month, .day], from: moved)
        return LocalDay(year: parts.year!, month: parts.month!, day: parts.day!)
    }

    static func < (lhs: LocalDay, rhs: LocalDay) -> Bool { (lhs.year, lhs.month, lhs.day) < (rhs.year, rhs.month, rhs.day) }
}
