import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKitDatabase
import ServiceKitHTTP

/// The queries on `profiles` and `calorie_goals`.
struct DietProfileStore: Sendable {
    /// The profile with the goal of `day` (today when nil); made with defaults on first sight (the
    /// event may still be on its way).
    func find(_ user: UUID, asOf day: LocalDay? = nil, on connection: PostgresConnection, logger: Logger) async throws -> DietProfile {
        if let found = try await read(user, asOf: day, on: connection, logger: logger) { return found }
        try await ensure(user, on: connection, logger: logger)
        if let found = try await read(user, asOf: day, on: connection, logger: logger) { return found }
        throw APIError(.internalServerError, code: "profile_missing", detail: "The diet profile could not be read.")
    }

    private func read(_ user: UUID, asOf day: LocalDay?, on connection: PostgresConnection, logger: Logger) async throws -> DietProfile? {
        // The goals come along (a handful of rows) and the day's is picked here: "today" is found
        // with Foundation's time zones, the same ones the zone was checked against.
        let rows = try await connection.checkedQuery(
            """
            SELECT p.diet, p.custom_protein::float8, p.custom_carbs::float8, p.custom_fat::float8, p.weight_unit, p.time_zone, p.day_starts_at, p.allergies::text,
                   (SELECT coalesce(json_agg(json_build_array(g.effective_from::text, g.daily_calories) ORDER BY g.effective_from DESC), '[]')::text
                    FROM calorie_goals g WHERE g.user_id = p.user_id)
            FROM profiles p WHERE p.user_id = \(user)
            """, logger: logger)
        for try await (diet, protein, carbs, fat, unit, zone, start, allergies, goals) in rows.decode((String, Double?, Double?, Double?, String, String, Int16, String, String).self) {
            var custom: MacroSplit?
            if let protein, let carbs, let fat { custom = MacroSplit(protein: protein, carbs: carbs, fat: fat) }
            var profile = DietProfile(
                diet: Diet(rawValue: diet) ?? .balanced, customMacros: custom, dailyCalorieGoal: DietProfile.defaultCalorieGoal,
                weightUnit: WeightUnit(rawValue: unit) ?? .kg, timeZone: zone, dayStartsAt: Int(start),
                allergies: (try? JSONDecoder().decode([Allergy].self, from: Data(allergies.utf8))) ?? [])
            let asOf = day ?? profile.localDay(of: Date())
            // Newest first; `-infinity` (the default from the start) reads as no date, the earliest.
            let entries = (try? JSONSerialization.jsonObject(with: Data(goals.utf8))) as? [[Any]] ?? []
            for entry in entries {
                guard entry.count == 2, let from = entry[0] as? String, let goal = entry[1] as? Int else { continue }
                if let starts = LocalDay(from), starts > asOf { continue }
                profile.dailyCalorieGoal = goal
                break
            }
            return profile
        }
        return nil
    }

    /// A profile with defaults and the default goal from the start of time, if there is none.
    func ensure(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        let made = try await connection.returnsRow(
            "INSERT INTO profiles (user_id) VALUES (\(user)) ON CONFLICT DO NOTHING RETURNING 1", logger: logger)
        if made {
            try await connection.checkedRun(
                """
                INSERT INTO calorie_goals (user_id, effective_from, daily_calories) VALUES (\(user), '-infinity', \(DietProfile.defaultCalorieGoal))
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
    }

    /// Replaces the profile; a new calorie goal counts from `today` (a past day keeps its goal).
    func replace(_ user: UUID, with profile: DietProfile, today: LocalDay, on connection: PostgresConnection, logger: Logger) async throws {
        try await ensure(user, on: connection, logger: logger)
        try await connection.checkedRun(
            """
            UPDATE profiles SET diet = \(profile.diet.rawValue), custom_protein = \(profile.customMacros?.protein), custom_carbs = \(profile.customMacros?.carbs),
              custom_fat = \(profile.customMacros?.fat), weight_unit = \(profile.weightUnit.rawValue), time_zone = \(profile.timeZone),
              day_starts_at = \(Int16(profile.dayStartsAt)), updated_at = now()
            WHERE user_id = \(user)
            """, logger: logger)
        try await connection.checkedRun(
            """
            INSERT INTO calorie_goals (user_id, effective_from, daily_calories) VALUES (\(user), \(today.description)::date, \(profile.dailyCalorieGoal))
            ON CONFLICT (user_id, effective_from) DO UPDATE SET daily_calories = EXCLUDED.daily_calories
            """, logger: logger)
    }

    func setAllergies(_ user: UUID, _ allergies: [Allergy], on connection: PostgresConnection, logger: Logger) async throws {
        try await ensure(user, on: connection, logger: logger)
        let json = String(decoding: try JSONEncoder().encode(allergies), as: UTF8.self)
        try await connection.checkedRun("UPDATE profiles SET allergies = \(json)::jsonb, updated_at = now() WHERE user_id = \(user)", logger: logger)
    }
}
