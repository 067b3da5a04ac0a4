import Foundation
import ServiceKit

/// `POST /v1/training/clients/{client_id}/assignments`: a workout on a list of days, or on some
/// days of the week for some weeks from a start day.
struct AssignmentDraft: Sendable {
    struct Body: StrictJSONBody {
        var workoutID: UUID
        var dates: [String]?
        var start: String?
        var daysOfWeek: [Int]?
        var weeks: Int?
        enum CodingKeys: String, CodingKey, CaseIterable { case workoutID = "workout_id", dates, start, daysOfWeek = "days_of_week", weeks }

        init(from decoder: any Decoder) throws {
            let json = try decoder.container(keyedBy: CodingKeys.self)
            workoutID = try json.decode(UUID.self, forKey: .workoutID)
            dates = try json.decodeIfPresent([String].self, forKey: .dates)
            start = try json.decodeIfPresent(String.self, forKey: .start)
            daysOfWeek = try json.decodeWholesIfPresent(forKey: .daysOfWeek)
            weeks = try json.decodeWholeIfPresent(forKey: .weeks)
        }
    }

    static let maxSessions = 100

    var workoutID: UUID
    /// `YYYY-MM-DD`, ascending, each once.
    var days: [String]

    init(_ body: Body) throws {
        workoutID = body.workoutID
        var problems: [Problem.FieldError] = []
        let weekly = body.start != nil || body.daysOfWeek != nil || body.weeks != nil
        var days: [String] = []
        if let dates = body.dates {
            if weekly { problems.append(.init(field: "dates", message: "give either dates or start, days_of_week and weeks")) }
            if dates.isEmpty || dates.count > Self.maxSessions { problems.append(.init(field: "dates", message: "must hold 1 to \(Self.maxSessions) days")) }
            for (index, day) in dates.prefix(Self.maxSessions).enumerated() where LocalDay(day) == nil {
                problems.append(.init(field: "dates[\(index)]", message: "must be a date, YYYY-MM-DD"))
            }
            days = dates
        } else if weekly {
            let start = body.start ?? ""
            if LocalDay(start) == nil { problems.append(.init(field: "start", message: "must be a date, YYYY-MM-DD")) }
            let weekdays = body.daysOfWeek ?? []
            if weekdays.isEmpty || weekdays.contains(where: { !(1...7).contains($0) }) || Set(weekdays).count != weekdays.count {
                problems.append(.init(field: "days_of_week", message: "must be 1 to 7 different ISO weekdays, 1 (Monday) to 7 (Sunday)"))
            }
            let weeks = body.weeks ?? 0
            if !(1...52).contains(weeks) { problems.append(.init(field: "weeks", message: "must be 1 to 52")) }
            if problems.isEmpty { days = Self.weekly(start: start, weekdays: Set(weekdays), weeks: weeks) }
        } else {
            problems.append(.init(field: "dates", message: "give dates, or start, days_of_week and weeks"))
        }
        // A day past 9999-12-31 is no date the API writes (nor one `dates` takes).
        if problems.isEmpty, weekly, days.contains(where: { LocalDay($0) == nil }) {
            problems.append(.init(field: "weeks", message: "runs past 9999-12-31"))
        }
        if problems.isEmpty, days.count > Self.maxSessions {
            problems.append(.init(field: "weeks", message: "makes \(days.count) sessions; at most \(Self.maxSessions) at once"))
        }
        if problems.isEmpty, days.isEmpty { problems.append(.init(field: "days_of_week", message: "names no day within the weeks from start")) }
        guard problems.isEmpty else { throw APIError.validation(problems) }
        self.days = Array(Set(days)).sorted()
    }

    /// The days within `weeks` weeks from `start` (itself included) that fall on `weekdays`.
    static func weekly(start: String, weekdays: Set<Int>, weeks: Int) -> [String] {
        guard let first = LocalDay(start) else { return [] }
        return (0..<(weeks * 7)).map { first.adding(days: $0) }.filter { weekdays.contains($0.isoWeekday) }.map(\.description)
    }
}
