import Foundation
@testable import Entitlements
import Models
import ServiceKit
import Testing
import TestSupport

/// What other services learn of the catalogue from the stream: the caps of a user nothing names,
/// each user's caps and the tier that would raise them, and, when the catalogue changes, the users
/// the change touched, once.
@Suite struct CatalogAnnouncementTests {
    /// The catalogue as the service announces it, run against the service's database as another
    /// start with `catalog` would.
    func announcer(_ env: EntitlementsTestEnvironment, _ catalog: Catalog, _ body: @escaping @Sendable (CatalogAnnouncer) async throws -> Void) async throws {
        try await withClient(env.database.config(for: env.serviceName, poolSize: 2)) { client in
            try await body(
                CatalogAnnouncer(
                    catalog: catalog, acceptsSandbox: false, postgres: client, outbox: EventOutbox(producer: "entitlements"), schema: env.config.database.schema,
                    clock: { env.clock.now() }, logger: TestEnvironment.logger))
        }
    }

    @Test func theFirstStartAnnouncesWhatAUserNothingNamesHas() async throws {
        try await EntitlementsTestEnvironment.run { env in
            try await waitUntil(.seconds(15)) { try await env.events("entitlement.catalog_changed").count == 1 }
            let announced = try #require(try await env.events("entitlement.catalog_changed").first)
            #expect(announced["default_tier"] as? String == "free")
            #expect((announced["features"] as? [String: Bool])?["meal_analysis"] == true)
            #expect((announced["limits"] as? [String: Any])?["meal_analyses_per_day"] as? Int == 3)
            #expect((announced["limits"] as? [String: Any])?["sources"] as? Int == 50)
            let upgrade = (announced["limit_upgrades"] as? [String: Any])?["meal_analyses_per_day"] as? [String: Any]
            #expect(upgrade?["tier"] as? String == "pro" && upgrade?["name"] as? String == "Pro")
            // Another start with the same catalogue tells nobody anything.
            try await announcer(env, try Catalog.load(path: nil)) { announcer in
                let told = try await announcer.announceIfChanged()
                #expect(told == 0)
            }
            // An event written after it reaches the stream after anything the second start wrote.
            let user = try await env.user()
            try await env.grant(user, tier: "pro")
            try await waitUntil(.seconds(15)) { try await env.events("entitlement.changed").contains { $0["user_id"] as? String == user.path } }
            #expect(try await env.events("entitlement.catalog_changed").count == 1)
        }
    }

    @Test func aPurchaseCarriesTheNewCapsAndWhatWouldRaiseThem() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            let bought = try await env.buy(try await env.transaction(original: "4000000001", for: user), as: user)
            #expect(bought.status == .ok || bought.status == .created, "\(bought.text)")
            try await waitUntil(.seconds(15)) { try await env.events("entitlement.changed").contains { $0["user_id"] as? String == user.path } }
            let changes = try await env.events("entitlement.changed").filter { $0["user_id"] as? String == user.path }
            #expect(changes.count == 1)
            let change = try #require(changes.first)
            #expect(change["tier"] as? String == "pro")
            let limits = try #require(change["limits"] as? [String: Any])
            #expect(limits["meal_analyses_per_day"] as? Int == 100)
            #expect(limits["sources"] is NSNull, "unlimited is a null, not a missing key")
            // Team gives no more analyses than Pro, and nothing gives more than unlimited.
            #expect((change["limit_upgrades"] as? [String: Any])?.isEmpty == true)
            #expect((change["features"] as? [String: Bool])?["meal_analysis"] == true)
            // As the consumers read it: the one type in Models.
            let decoded = try JSONDecoder().decode(EntitlementChanged.self, from: try JSONSerialization.data(withJSONObject: change))
            #expect(decoded.limits?["meal_analyses_per_day"] == .some(100) && decoded.limits?["sources"] == .some(nil))
        }
    }

    @Test func aChangedCatalogueTellsTheUsersItTouchedOnce() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let free = try await env.user()
            let paying = try await env.user()
            #expect(try await env.buy(try await env.transaction(original: "4000000002", for: paying), as: paying).status.code < 300)
            try await waitUntil(.seconds(15)) { try await env.events("entitlement.changed").contains { $0["user_id"] as? String == paying.path } }
            #expect(try await env.events("entitlement.changed").contains { $0["user_id"] as? String == free.path } == false)

            var changed = try Catalog.load(path: nil)
            let freeIndex = try #require(changed.tiers.firstIndex { $0.id == "free" })
            changed.tiers[freeIndex].limits["meal_analyses_per_day"] = 5
            try changed.validate()
            try await announcer(env, changed) { announcer in
                let told = try await announcer.announceIfChanged()
                #expect(told == 1, "only the free user's tier changed")
                let again = try await announcer.announceIfChanged()
                #expect(again == 0, "announced once")
            }
            try await waitUntil(.seconds(15)) { try await env.events("entitlement.catalog_changed").count == 2 }
            let latest = try #require(try await env.events("entitlement.catalog_changed").last)
            #expect((latest["limits"] as? [String: Any])?["meal_analyses_per_day"] as? Int == 5)
            try await waitUntil(.seconds(15)) { try await env.events("entitlement.changed").contains { $0["user_id"] as? String == free.path } }
            let told = try #require(try await env.events("entitlement.changed").first { $0["user_id"] as? String == free.path })
            #expect(told["tier"] as? String == "free")
            #expect((told["limits"] as? [String: Any])?["meal_analyses_per_day"] as? Int == 5)
            #expect(try await env.events("entitlement.changed").filter { $0["user_id"] as? String == paying.path }.count == 1, "Pro did not change")

            // A tier whose products move: whoever holds a purchase may change tier, and is told.
            var moved = changed
            let proIndex = try #require(moved.tiers.firstIndex { $0.id == "pro" })
            let academicIndex = try #require(moved.tiers.firstIndex { $0.id == "academic" })
            moved.tiers[proIndex].products.removeAll { $0 == "com.researchapp.pro.monthly" }
            moved.tiers[academicIndex].products.append("com.researchapp.pro.monthly")
            try moved.validate()
            try await announcer(env, moved) { announcer in
                let told = try await announcer.announceIfChanged()
                #expect(told == 1, "the paying user, not the free one")
            }
            try await waitUntil(.seconds(15)) {
                try await env.events("entitlement.changed").contains { $0["user_id"] as? String == paying.path && $0["tier"] as? String == "academic" }
            }
        }
    }
}
