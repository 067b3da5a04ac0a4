import Foundation
import Models
import Testing

@Suite struct LocalDayTests {
    /// The texts every service takes for a day: PostgreSQL's `date` takes each, and none is read as
    /// another day than it names.
    @Test func onlyWholeDaysOfTheCalendarFrom1900AreTaken() {
        for text in ["1900-01-01", "2024-02-29", "2000-02-29", "2030-12-31", "9999-12-31"] {
            #expect(LocalDay(text)?.description == text, "\(text)")
        }
        // No 29 February in a common year or a century not divisible by 400; no 31st in a month of 30.
        for text in ["2025-02-29", "1900-02-29", "2100-02-29", "2030-04-31", "2030-13-01", "2030-00-10", "2030-01-00", "2030-01-32"] {
            #expect(LocalDay(text) == nil, "\(text)")
        }
        // Two digits each for month and day; ASCII digits only (a sign or Arabic-Indic digit is not
        // one, and `Int` would take "+1"); PostgreSQL has no year 0, and no one logs before 1900.
        for text in ["2025-3-1", "2025-03-1", "25-03-01", "2025-+3-01", "+025-01-01", "2025-03-01 ", "２０２５-03-01", "0000-01-01", "1899-12-31", "", "2025-03", "2025-03-01-01"] {
            #expect(LocalDay(text) == nil, "\(text)")
        }
    }

    /// Day numbers, weekdays and text agree with Foundation's Gregorian calendar on every day from
    /// 1900 to 2100, either side of 1970's day 0.
    @Test func arithmeticAgreesWithTheGregorianCalendar() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "UTC"))
        let first = try #require(LocalDay("1900-01-01"))
        let last = try #require(LocalDay("2100-12-31"))
        var moment = try #require(calendar.date(from: DateComponents(year: 1900, month: 1, day: 1)))
        var mismatches = 0
        for number in first.dayNumber...last.dayNumber {
            let day = LocalDay(dayNumber: number)
            let parts = calendar.dateComponents([.year, .month, .day, .weekday], from: moment)
            // Foundation counts weekdays from Sunday = 1; ISO from Monday = 1.
            let isoWeekday = parts.weekday! == 1 ? 7 : parts.weekday! - 1
            if day.year != parts.year || day.month != parts.month || day.day != parts.day || day.isoWeekday != isoWeekday || day.dayNumber != number
                || LocalDay(day.description) != day
            {
                mismatches += 1
            }
            moment = moment.addingTimeInterval(86_400)
        }
        #expect(mismatches == 0)
        #expect(first.distance(to: last) == last.dayNumber - first.dayNumber)
        #expect(LocalDay("2030-01-07")?.isoWeekday == 1)
        #expect(LocalDay("1970-01-01")?.dayNumber == 0)
    }
}
