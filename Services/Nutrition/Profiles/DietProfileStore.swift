import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// The queries on `profiles` and `calorie_goals`.
struct DietProfileStore: Sendable {
    /// Profiles with their goals as last read, per process, served while the change feed vouches
    /// that none of them changed since (`Nutrition.dietProfile`); nil keeps none.
    let kept: VersionedCache<UUID, ProfileRecord>?

    init(kept: VersionedCache<UUID, ProfileRecord>? = nil) {
        self.kept = kept
    }

    /// The profile with the goal of `day` (today when nil); made with defaults on first sight (the
    /// event may still be on its way), except for a deleted account, whose token can outlive it by
    /// a few minutes: `401 account_deleted`, as social answers it.
    func find(_ user: UUID, asOf day: LocalDay? = nil, on connection: PostgresConnection, logger: Logger) async throws -> DietProfile {
        try await record(user, asOf: day, on: connection, logger: logger).profile
    }

    /// `find`, with every calorie goal the user has had (for a period of days, each with its own) and
    /// the diary's version.
    func record(_ user: UUID, asOf day: LocalDay? = nil, on connection: PostgresConnection, logger: Logger) async throws -> ProfileRecord {
        if let found = try await read(user, asOf: day, on: connection, logger: logger) { return found }
        try await ensure(user, on: connection, logger: logger)
        if let found = try await read(user, asOf: day, on: connection, logger: logger) { return found }
        throw APIError.accountDeleted
    }

    /// A profile, its goals and its diary's version, prepared once per connection: most requests read
    /// it first. Arrays rather than JSON, which cost more to decode than the row.
    struct ProfileByUser: OneParameterStatement {
        static let name = "nutrition.profile_by_user"
        static let sql = """
            SELECT p.diet, p.custom_protein::float8, p.custom_carbs::float8, p.custom_fat::float8, p.weight_unit, p.time_zone, p.day_starts_at,
                   ARRAY(SELECT coalesce(a->>'name', '') FROM jsonb_array_elements(p.allergies) a),
                   ARRAY(SELECT coalesce(a->>'severity', '') FROM jsonb_array_elements(p.allergies) a),
                   ARRAY(SELECT g.effective_from::text FROM calorie_goals g WHERE g.user_id = p.user_id ORDER BY g.effective_from DESC),
                   ARRAY(SELECT g.daily_calories FROM calorie_goals g WHERE g.user_id = p.user_id ORDER BY g.effective_from DESC),
                   v.version
            FROM profiles p LEFT JOIN diary_versions v ON v.user_id = p.user_id WHERE p.user_id = $1
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid]
        typealias Row = ProfileRecord

        var user: UUID
        var parameter: UUID { user }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (diet, protein, carbs, fat, unit, zone, start, allergyNames, severities, goalStarts, goalCalories, version) = try row.decode(
                (String, Double?, Double?, Double?, String, String, Int16, [String], [String], [String], [Int], Int64?).self)
            var custom: MacroSplit?
            if let protein, let carbs, let fat { custom = MacroSplit(protein: protein, carbs: carbs, fat: fat) }
            // An entry that is not an allergy (no name, a severity not known) is left out, not the list.
            let allergies = zip(allergyNames, severities).compactMap { name, severity in
                name.isEmpty ? nil : Allergy.Severity(rawValue: severity).map { Allergy(name: name, severity: $0) }
            }
            let profile = DietProfile(
                diet: Diet(rawValue: diet) ?? .balanced, customMacros: custom, dailyCalorieGoal: DietProfile.defaultCalorieGoal,
                weightUnit: WeightUnit(rawValue: unit) ?? .kg, timeZone: zone, dayStartsAt: Int(start), allergies: allergies)
            // `-infinity` (the default from the start) reads as no date, the earliest.
            return ProfileRecord(
                profile: profile, goals: CalorieGoals(newestFirst: zip(goalStarts, goalCalories).map { (LocalDay($0), $1) }), diaryVersion: version)
        }
    }

    private func read(_ user: UUID, asOf day: LocalDay?, on connection: PostgresConnection, logger: Logger) async throws -> ProfileRecord? {
        for try await found in try await connection.checkedExecute(ProfileByUser(user: user), logger: logger) {
            var record = found
            if let goal = record.goals.goal(on: day ?? record.profile.localDay(of: Date())) { record.profile.dailyCalorieGoal = goal }
            return record
        }
        return nil
    }

    /// A profile with defaults and the default goal from the start of time, if there is none and the
    /// account was not deleted. Each row is made holding the account (`hold_live_account`), so a
    /// deletion running meanwhile finds it.
    func ensure(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        let made = try await connection.returnsRow(
            """
            INSERT INTO profiles (user_id) SELECT \(user) WHERE hold_live_account(\(user))
            ON CONFLICT DO NOTHING RETURNING 1
            """, logger: logger)
        if made {
            try await connection.checkedRun(
                """
                INSERT INTO calorie_goals (user_id, effective_from, daily_calories)
                SELECT \(user), '-infinity', \(DietProfile.defaultCalorieGoal) WHERE hold_live_account(\(user))
                ON CONFLICT DO NOTHING
                """, logger: logger)
            forgetKeptAfterCommit(user)
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
        // A goal dated after today (set in a zone further east, before a move west) would take over
        // again when its day came: the goal set now holds from today on.
        try await connection.checkedRun(
            "DELETE FROM calorie_goals WHERE user_id = \(user) AND effective_from > \(today.description)::date", logger: logger)
        try await connection.checkedRun(
            """
            INSERT INTO calorie_goals (user_id, effective_from, daily_calories)
            SELECT \(user), \(today.description)::date, \(profile.dailyCalorieGoal) WHERE hold_live_account(\(user))
            ON CONFLICT (user_id, effective_from) DO UPDATE SET daily_calories = EXCLUDED.daily_calories
            """, logger: logger)
        forgetKeptAfterCommit(user)
    }

    func setAllergies(_ user: UUID, _ allergies: [Allergy], on connection: PostgresConnection, logger: Logger) async throws {
        try await ensure(user, on: connection, logger: logger)
        let json = String(decoding: try JSONEncoder().encode(allergies), as: UTF8.self)
        try await connection.checkedRun("UPDATE profiles SET allergies = \(json)::jsonb, updated_at = now() WHERE user_id = \(user)", logger: logger)
        forgetKeptAfterCommit(user)
    }

    /// Forgets the profile this process kept for `user` once the current transaction commits (at
    /// once outside one: call it after the write), so the request that changed it reads the change
    /// next, here, without waiting for the change feed.
    func forgetKeptAfterCommit(_ user: UUID) {
        guard let kept else { return }
        WorkBell.runAfterCommit { kept.forget(user) }
    }

    /// The profile as `record` reads it, kept for the change feed to vouch for: unless the user was
    /// forgotten since `epoch`, taken before the read (the profile may have changed after it), and
    /// only outside a transaction, whose own writes (not yet committed, perhaps never) it could read.
    /// Its goals are kept with it, so that what it gives has the goal of the day it is asked on.
    func recordKeeping(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> ProfileRecord {
        let epoch = kept?.epoch(for: user)
        var record = try await record(user, on: connection, logger: logger)
        // The diary's version moves with meals and is not announced: what is kept leaves it out.
        record.diaryVersion = nil
        if !WorkBell.inTransaction { kept?.store(record, for: user, version: 0, unlessForgottenSince: epoch) }
        return record
    }
}
