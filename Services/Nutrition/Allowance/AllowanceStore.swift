import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// How many of something a user may do, as entitlements last said: the catalogue is its file, and
/// nutrition learns each user's tier and caps from `entitlement.changed`, and the caps of a user no
/// event has named yet from `entitlement.catalog_changed`. No call to entitlements is made.
struct Allowance: Sendable, Equatable {
    /// The user's tier (the catalogue's default tier for a user no event has named).
    var tier: String
    /// The cap; nil is unlimited.
    var cap: Int?
    /// The cheapest tier that would raise the cap, and its name for a message; nil when none does.
    var upgradeTier: String?
    var upgradeTierName: String?
}

/// The analyses of meal photos a user may run per local day.
typealias MealAnalysisAllowance = Allowance

extension Allowance {
    /// The cap per day, for the analysis routes.
    var perDay: Int? { cap }
}

/// The queries on `user_limits` and `limit_defaults`.
struct AllowanceStore: Sendable {
    /// The catalogue's name of the daily cap on photo analyses.
    static let mealAnalysesPerDay = "meal_analyses_per_day"

    /// A user's `meal_analyses_per_day`; nil only while entitlements has never announced its
    /// catalogue to this service (a system started moments ago): the caller refuses rather than
    /// guesses.
    func mealAnalyses(for user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> MealAnalysisAllowance? {
        try await allowance(Self.mealAnalysesPerDay, for: user, on: connection, logger: logger)
    }

    /// A user's cap on `limit`: from the event that last named them, else from the catalogue's
    /// default; a limit their event did not carry (sent before it existed) takes the default's cap.
    func allowance(_ limit: String, for user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Allowance? {
        let rows = try await connection.checkedQuery(
            """
            SELECT u.tier, u.limits::text, u.limit_upgrades::text, d.tier, d.limits::text, d.limit_upgrades::text
            FROM (SELECT 1) one
            LEFT JOIN user_limits u ON u.user_id = \(user)
            LEFT JOIN limit_defaults d ON d.only_row
            """, logger: logger
        ).decode((String?, String?, String?, String?, String?, String?).self)
        for try await (userTier, userLimits, userUpgrades, defaultTier, defaultLimits, defaultUpgrades) in rows {
            let decoder = JSONDecoder()
            func caps(_ text: String?) -> [String: Int?]? { text.flatMap { try? decoder.decode([String: Int?].self, from: Data($0.utf8)) } }
            func upgrades(_ text: String?) -> [String: LimitUpgrade]? { text.flatMap { try? decoder.decode([String: LimitUpgrade].self, from: Data($0.utf8)) } }
            if let userTier, let userCaps = caps(userLimits), let cap = userCaps[limit] {
                let upgrade = upgrades(userUpgrades)?[limit]
                return Allowance(tier: userTier, cap: cap, upgradeTier: upgrade?.tier, upgradeTierName: upgrade?.name)
            }
            guard let defaultTier, let defaultCaps = caps(defaultLimits) else { return nil }
            // A limit the catalogue does not have is not capped.
            let cap = defaultCaps[limit] ?? nil
            let upgrade = upgrades(defaultUpgrades)?[limit]
            return Allowance(tier: userTier ?? defaultTier, cap: cap, upgradeTier: upgrade?.tier, upgradeTierName: upgrade?.name)
        }
        return nil
    }

    /// Keeps what `entitlement.changed` says of its user, unless a later event said otherwise.
    func record(_ event: EntitlementChanged, order: EventOrder, on connection: PostgresConnection, logger: Logger) async throws {
        let limits = try event.limits.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
        let upgrades = String(decoding: try JSONEncoder().encode(event.limitUpgrades ?? [:]), as: UTF8.self)
        try await connection.checkedRun(
            """
            INSERT INTO user_limits (user_id, tier, limits, limit_upgrades, changed_at, changed_seq)
            VALUES (\(event.userID), \(event.tier), \(limits)::jsonb, \(upgrades)::jsonb, \(order.occurredAt), \(order.sequence)::int8)
            ON CONFLICT (user_id) DO UPDATE SET
              tier = EXCLUDED.tier, limits = EXCLUDED.limits, limit_upgrades = EXCLUDED.limit_upgrades,
              changed_at = EXCLUDED.changed_at, changed_seq = EXCLUDED.changed_seq
            WHERE CASE WHEN user_limits.changed_seq IS NOT NULL AND EXCLUDED.changed_seq IS NOT NULL THEN user_limits.changed_seq < EXCLUDED.changed_seq
                       ELSE user_limits.changed_at <= EXCLUDED.changed_at END
            """, logger: logger)
    }

    /// Keeps the catalogue's default, unless a later announcement said otherwise.
    func recordDefaults(_ event: EntitlementCatalogChanged, order: EventOrder, on connection: PostgresConnection, logger: Logger) async throws {
        let limits = String(decoding: try JSONEncoder().encode(event.limits), as: UTF8.self)
        let upgrades = String(decoding: try JSONEncoder().encode(event.limitUpgrades), as: UTF8.self)
        try await connection.checkedRun(
            """
            INSERT INTO limit_defaults (tier, limits, limit_upgrades, changed_at, changed_seq)
            VALUES (\(event.defaultTier), \(limits)::jsonb, \(upgrades)::jsonb, \(order.occurredAt), \(order.sequence)::int8)
            ON CONFLICT (only_row) DO UPDATE SET
              tier = EXCLUDED.tier, limits = EXCLUDED.limits, limit_upgrades = EXCLUDED.limit_upgrades,
              changed_at = EXCLUDED.changed_at, changed_seq = EXCLUDED.changed_seq
            WHERE CASE WHEN limit_defaults.changed_seq IS NOT NULL AND EXCLUDED.changed_seq IS NOT NULL THEN limit_defaults.changed_seq < EXCLUDED.changed_seq
                       ELSE limit_defaults.changed_at <= EXCLUDED.changed_at END
            """, logger: logger)
    }

    func forget(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM user_limits WHERE user_id = \(user)", logger: logger)
    }
}
