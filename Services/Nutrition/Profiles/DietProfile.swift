import Foundation
import ServiceKit

/// What meals are scored against and how their day is found.
struct DietProfile: Sendable, Equatable {
    var diet: Diet
    var customMacros: MacroSplit?
    var dailyCalorieGoal: Int
    var weightUnit: WeightUnit
    var timeZone: String
    var dayStartsAt: Int
    var allergies: [Allergy]

    static let defaultCalorieGoal = 2000

    var zone: TimeZone { TimeZone(identifier: timeZone) ?? TimeZone(identifier: "UTC")! }

    func localDay(of moment: Date) -> LocalDay { LocalDay(moment, in: zone, dayStartsAt: dayStartsAt) }
}

enum WeightUnit: String, Codable, Sendable {
    case kg, lbs
    /// Exactly, by definition.
    static let kilogramsPerPound = "0.45359237"
}

/// A profile as stored: the profile (with the goal of the day asked for), every calorie goal it has
/// had, and its diary's version, which changes with anything a trend shows (nil until the diary's
/// first change).
struct ProfileRecord: Sendable {
    var profile: DietProfile
    var goals: CalorieGoals
    var diaryVersion: Int64?
}

/// A user's calorie goals, newest first: each holds from its day (`nil`: from the start) until the
/// next one's.
struct CalorieGoals: Sendable {
    var newestFirst: [(from: LocalDay?, calories: Int)]

    func goal(on day: LocalDay) -> Int? {
        newestFirst.first { $0.from.map { $0 <= day } ?? true }?.calories
    }
}
