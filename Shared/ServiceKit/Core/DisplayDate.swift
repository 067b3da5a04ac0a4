import Foundation

/// Dates as mails and pages write them for people: in words, the same in every service.
public enum DisplayDate {
    /// "26 November 2026" (UTC).
    public static func day(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "d MMMM yyyy"
        return formatter.string(from: date)
    }
}
