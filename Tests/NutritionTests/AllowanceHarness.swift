import Foundation
import Models
@testable import Nutrition
import ServiceKit
import Testing
import TestSupport

/// Entitlements' events as entitlements writes them: its catalogue's default, and a user's tier and
/// caps; each awaited until nutrition has kept it.
extension NutritionTestEnvironment {
    /// `entitlement.catalog_changed` with the free tier's daily analyses (nil: unlimited).
    func announceCatalog(freeMealAnalysesPerDay perDay: Int? = 3, occurredAt: Date = Date()) async throws {
        try await publish(
            EntitlementCatalogChanged(
                defaultTier: "free", features: ["meal_analysis": true], limits: [AllowanceStore.mealAnalysesPerDay: perDay, "sources": 50],
                limitUpgrades: [AllowanceStore.mealAnalysesPerDay: LimitUpgrade(tier: "pro", name: "Pro")]),
            userID: nil, producer: "entitlements", occurredAt: occurredAt)
        let expected = perDay.map(String.init) ?? "null"
        try await waitUntil(.seconds(15)) {
            try await count("SELECT count(*) FROM limit_defaults WHERE limits->>'\(AllowanceStore.mealAnalysesPerDay)' IS NOT DISTINCT FROM \(perDay == nil ? "NULL" : "'\(expected)'")") == 1
        }
    }

    /// `entitlement.changed` for `user`; `upgrade` is the tier that would raise the cap.
    func setTier(
        _ user: User, tier: String, mealAnalysesPerDay perDay: Int?, upgrade: LimitUpgrade? = nil, occurredAt: Date = Date(), wait: Bool = true
    ) async throws {
        try await publish(
            EntitlementChanged(
                userID: user.id, tier: tier, state: "active", features: ["meal_analysis": true], limits: [AllowanceStore.mealAnalysesPerDay: perDay],
                limitUpgrades: upgrade.map { [AllowanceStore.mealAnalysesPerDay: $0] } ?? [:]),
            userID: user.id, producer: "entitlements", occurredAt: occurredAt)
        if wait {
            try await waitUntil(.seconds(15)) { try await count("SELECT count(*) FROM user_limits WHERE user_id = '\(user.id)' AND tier = '\(tier)'") == 1 }
        }
    }

    /// The user's daily analyses as the analysis routes read them.
    func mealAnalysisAllowance(_ user: User) async throws -> MealAnalysisAllowance? {
        try await withClient(database.config(for: serviceName, poolSize: 1)) { client in
            try await client.withConnection { connection in
                try await AllowanceStore().mealAnalyses(for: user.id, on: connection, logger: TestEnvironment.logger)
            }
        }
    }
}
