import Foundation
import Models
@testable import Nutrition
import ServiceKit
import Testing
import TestSupport

/// The daily photo analyses a user may run, learned from entitlements' events through the stream:
/// the catalogue's default for a user no event has named, each user's tier and cap, later events
/// winning over late ones, nothing kept of a deleted account.
@Suite struct AllowanceTests {
    @Test func aUserNoEventNamedHasTheCataloguesDefaultOnceItIsAnnounced() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            #expect(try await env.mealAnalysisAllowance(user) == nil, "nothing is guessed before entitlements has spoken")
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            #expect(
                try await env.mealAnalysisAllowance(user) == MealAnalysisAllowance(tier: "free", cap: 3, upgradeTier: "pro", upgradeTierName: "Pro"))
            // A newer catalogue replaces it; an older one delivered late does not.
            try await env.announceCatalog(freeMealAnalysesPerDay: 5)
            #expect(try await env.mealAnalysisAllowance(user)?.perDay == 5)
            try await env.publish(
                EntitlementCatalogChanged(
                    defaultTier: "free", features: [:], limits: [AllowanceStore.mealAnalysesPerDay: 1], limitUpgrades: [:]),
                userID: nil, producer: "entitlements", occurredAt: Date() - 3600)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'entitlement.catalog_changed'") == 3 }
            #expect(try await env.mealAnalysisAllowance(user)?.perDay == 5)
        }
    }

    @Test func aPurchaseLiftsTheCapAndALateEventDoesNotLowerIt() async throws {
        try await NutritionTestEnvironment.run { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            let other = try await env.user()
            try await env.setTier(user, tier: "pro", mealAnalysesPerDay: 100)
            #expect(try await env.mealAnalysisAllowance(user) == MealAnalysisAllowance(tier: "pro", cap: 100, upgradeTier: nil, upgradeTierName: nil))
            #expect(try await env.mealAnalysisAllowance(other)?.perDay == 3, "one user's purchase is theirs alone")
            // The free tier from before the purchase, redelivered after it.
            try await env.setTier(
                user, tier: "free", mealAnalysesPerDay: 3, upgrade: LimitUpgrade(tier: "pro", name: "Pro"), occurredAt: Date() - 600, wait: false)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'entitlement.changed'") == 2 }
            #expect(try await env.mealAnalysisAllowance(user)?.tier == "pro")
            // The subscription ends: back to the free cap, and the tier that would lift it.
            try await env.setTier(user, tier: "free", mealAnalysesPerDay: 3, upgrade: LimitUpgrade(tier: "pro", name: "Pro"))
            #expect(
                try await env.mealAnalysisAllowance(user) == MealAnalysisAllowance(tier: "free", cap: 3, upgradeTier: "pro", upgradeTierName: "Pro"))
            // Unlimited is carried as such.
            try await env.setTier(user, tier: "team", mealAnalysesPerDay: nil)
            let team = try #require(try await env.mealAnalysisAllowance(user))
            #expect(team.tier == "team" && team.perDay == nil)
        }
    }

    @Test func anEventFromBeforeCapsWereCarriedKeepsTheDefaultCap() async throws {
        try await NutritionTestEnvironment.run { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            try await env.publish(
                EntitlementChanged(userID: user.id, tier: "academic", state: "active", features: ["ai_suggestions": true]), userID: user.id,
                producer: "entitlements")
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM user_limits WHERE user_id = '\(user.id)'") == 1 }
            let allowance = try #require(try await env.mealAnalysisAllowance(user))
            #expect(allowance.tier == "academic" && allowance.perDay == 3)
        }
    }

    @Test func aDeletedAccountKeepsNoCapsAndALateEventMakesNoneAgain() async throws {
        try await NutritionTestEnvironment.run { env in
            try await env.announceCatalog(freeMealAnalysesPerDay: 3)
            let user = try await env.user()
            try await env.setTier(user, tier: "pro", mealAnalysesPerDay: 100)
            try await env.publish(UserDeleted(userID: user.id), userID: user.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM user_limits WHERE user_id = '\(user.id)'") == 0 }
            try await env.setTier(user, tier: "pro", mealAnalysesPerDay: 100, occurredAt: Date() + 1, wait: false)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'entitlement.changed'") == 2 }
            #expect(try await env.count("SELECT count(*) FROM user_limits WHERE user_id = '\(user.id)'") == 0)
        }
    }
}
