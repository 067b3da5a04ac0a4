import Foundation
import Hummingbird
import ServiceKit

/// The caller's diet profile: the diet meals are scored against, the calorie goal, the unit, and
/// the time zone and hour a day starts at.
struct DietProfileRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        let profile = router.group("v1/nutrition/profile", context: AuthenticatedContext.self)
        profile.get(use: current)
        profile.put(use: replace)
    }

    struct ProfileView: ResponseEncodable {
        var profile: DietProfile
        func encode(to encoder: any Encoder) throws {
            var json = encoder.container(keyedBy: AnyKey.self)
            try json.encode(profile.diet, forKey: AnyKey("diet"))
            try json.encode(profile.customMacros, forKey: AnyKey("custom_macros"))
            try json.encode(profile.dailyCalorieGoal, forKey: AnyKey("daily_calorie_goal"))
            try json.encode(profile.weightUnit, forKey: AnyKey("weight_unit"))
            try json.encode(profile.timeZone, forKey: AnyKey("time_zone"))
            try json.encode(profile.dayStartsAt, forKey: AnyKey("day_starts_at"))
            try json.encode(profile.allergies, forKey: AnyKey("allergies"))
        }
    }

    struct Body: StrictJSONBody {
        var diet: String
        var customMacros: MacroSplit?
        var dailyCalorieGoal: Int
        var weightUnit: String
        var timeZone: String
        var dayStartsAt: Int?
        enum CodingKeys: String, CodingKey, CaseIterable {
            case diet, customMacros = "custom_macros", dailyCalorieGoal = "daily_calorie_goal", weightUnit = "weight_unit", timeZone = "time_zone"
            case dayStartsAt = "day_starts_at"
        }
    }

    @Sendable func current(_ request: Request, context: AuthenticatedContext) async throws -> ProfileView {
        let nutrition = self.nutrition
        return ProfileView(
            profile: try await nutrition.postgres.withConnectionOnItsLoop { connection in
                try await nutrition.profiles.find(context.caller.userID, on: connection, logger: context.logger)
            })
    }

    /// Replaces the profile. A changed calorie goal counts from today: past days keep theirs.
    @Sendable func replace(_ request: Request, context: AuthenticatedContext) async throws -> ProfileView {
        let body = try await request.decode(as: Body.self, context: context)
        var problems: [Problem.FieldError] = []
        let diet = Diet(rawValue: body.diet)
        if diet == nil { problems.append(.init(field: "diet", message: "must be one of \(Diet.allCases.map(\.rawValue).joined(separator: ", "))")) }
        if diet == .custom {
            if let split = body.customMacros {
                let parts = [split.protein, split.carbs, split.fat]
                if parts.contains(where: { !$0.isFinite || $0 < 0 || $0 > 100 }) || abs(parts.reduce(0, +) - 100) > 0.001 {
                    problems.append(.init(field: "custom_macros", message: "protein, carbs and fat are percentages of energy from 0 to 100 that sum to 100"))
                }
            } else {
                problems.append(.init(field: "custom_macros", message: "is required for the custom diet"))
            }
        } else if body.customMacros != nil {
            problems.append(.init(field: "custom_macros", message: "is only for the custom diet"))
        }
        if !(800...10_000).contains(body.dailyCalorieGoal) { problems.append(.init(field: "daily_calorie_goal", message: "must be 800 to 10000")) }
        let unit = WeightUnit(rawValue: body.weightUnit)
        if unit == nil { problems.append(.init(field: "weight_unit", message: "must be kg or lbs")) }
        let start = body.dayStartsAt ?? 0
        if !(0...6).contains(start) { problems.append(.init(field: "day_starts_at", message: "must be an hour from 0 to 6")) }
        if !problems.isEmpty { throw APIError.validation(problems) }
        guard body.timeZone.count <= 64, body.timeZone.contains("/") || body.timeZone == "UTC", TimeZone(identifier: body.timeZone) != nil else {
            throw APIError(
                .badRequest, code: "invalid_time_zone", detail: "\"\(body.timeZone)\" is not an IANA time zone (such as Europe/Paris).",
                errors: [.init(field: "time_zone", message: "must be an IANA time zone name")])
        }
        let nutrition = self.nutrition
        let user = context.caller.userID
        let profile = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            let before = try await nutrition.profiles.find(user, on: connection, logger: context.logger)
            var after = before
            after.diet = diet!
            after.customMacros = diet == .custom ? body.customMacros : nil
            after.dailyCalorieGoal = body.dailyCalorieGoal
            after.weightUnit = unit!
            after.timeZone = body.timeZone
            after.dayStartsAt = start
            try await nutrition.profiles.replace(user, with: after, today: after.localDay(of: Date()), on: connection, logger: context.logger)
            return try await nutrition.profiles.find(user, on: connection, logger: context.logger)
        }
        return ProfileView(profile: profile)
    }
}
