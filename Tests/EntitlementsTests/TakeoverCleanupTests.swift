import Foundation
import HTTPTypes
@testable import Entitlements
import Models
import Testing
import TestSupport

/// When the mailbox's owner first proves the address (`maker_dropped`), what the account's maker set
/// up here goes: the spaces it owns with their members and invitations, its memberships of others'
/// spaces and the transfers offered to it, the invitations it made, the usage it counted; and the App
/// Store subscriptions it bought go back to the Apple ID that paid, under a new `appAccountToken`.
@Suite struct TakeoverCleanupTests {
    typealias Env = EntitlementsTestEnvironment

    /// An acquisition by the maker's token that commits while the takeover forgets the usage goes
    /// with its counter: none is left to be released later from the owner's count.
    @Test func anAcquisitionDuringTheTakeoverGoesWithItsCounter() async throws {
        try await Env.run { env in
            let maker = try await env.user()
            #expect(try await env.call(.post, "/v1/usage/sources/acquire", as: maker, json: ["amount": 3], headers: [HTTPField.Name("Idempotency-Key")!: "maker-1"]).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(maker.id)'") == 1)
            let id = maker.id.uuidString.lowercased()
            // The acquisition's two statements, as the route runs them, committed only once the
            // takeover waits for the counter's row.
            try await env.inOpenTransaction(
                [
                    "UPDATE usage_counters SET used = used + 2 WHERE user_id = '\(id)' AND counter = 'sources'",
                    "INSERT INTO usage_acquisitions (id, user_id, counter, amount) VALUES (gen_random_uuid(), '\(id)', 'sources', 2)",
                ],
                while: {
                    try await env.publish(UserPasswordChanged(userID: maker.id, method: .reset, makerDropped: true), userID: maker.id)
                    try await waitUntil(.seconds(15)) {
                        try await env.count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM usage_%'") == 1
                    }
                })
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'user.password_changed'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM usage_counters WHERE user_id = '\(id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM usage_acquisitions WHERE user_id = '\(id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(id)'") == 0)
        }
    }

    @Test func aFirstProofDropsTheMakersSpacesMembershipsAndPurchases() async throws {
        try await Env.run { env in
            // The maker signed up with the victim's address (never proven) and bought Team.
            let maker = try await env.user(verified: false)
            let oldToken = try #require(try await env.me(maker)["app_account_token"] as? String)
            let purchase = try await env.transaction("com.researchapp.team.monthly", original: "3000000001", for: maker)
            #expect(try await env.buy(purchase, as: maker).json["tier"] as? String == "team")
            #expect(try await env.call(.post, "/v1/usage/sources/acquire", as: maker, json: ["amount": 48]).json["used"] as? Int == 48)

            // A space of the maker's, with a sockpuppet member and an invitation by address.
            let puppet = try await env.user()
            let mine = try await SpaceTests.space(env, of: maker, name: "The maker's")
            try await SpaceTests.add(env, puppet, as: "editor", to: mine, by: maker)
            let invited = "\(TestEnvironment.uniqueName("later"))@example.com"
            #expect(try await env.call(.post, "/v1/spaces/\(mine)/members", as: maker, json: ["email": invited, "permission": "viewer"]).status == .created)

            // A friend's space the maker joined and was offered.
            let friend = try await env.user()
            try await env.grant(friend, tier: "team")
            let theirs = try await SpaceTests.space(env, of: friend, name: "The friend's")
            try await SpaceTests.add(env, maker, as: "editor", to: theirs, by: friend)
            #expect(try await env.call(.post, "/v1/spaces/\(theirs)/transfer", as: friend, json: ["user_id": maker.path]).status == .ok)
            // Invitations by id, still pending: one to the maker, one from the maker.
            let other = try await SpaceTests.space(env, of: friend, name: "Another of the friend's")
            #expect(try await env.call(.post, "/v1/spaces/\(other)/members", as: friend, json: ["user_id": maker.path, "permission": "viewer"]).status == .created)
            let stranger = try await env.user()
            #expect(try await env.call(.post, "/v1/spaces/\(mine)/members", as: maker, json: ["user_id": stranger.path, "permission": "viewer"]).status == .created)

            try await env.publish(UserPasswordChanged(userID: maker.id, method: .reset, makerDropped: true), userID: maker.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM spaces WHERE id = '\(mine)'") == 0 }

            #expect(try await env.count("SELECT count(*) FROM space_members WHERE space_id = '\(mine)' OR user_id = '\(maker.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE space_id = '\(mine)' OR invited_by = '\(maker.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM space_account_invitations WHERE user_id = '\(maker.id)' OR invited_by = '\(maker.id)'") == 0)
            #expect(try await env.call(.get, "/v1/spaces/invitations", as: stranger).items.isEmpty)
            #expect(try await env.call(.get, "/v1/spaces/\(mine)", as: puppet).code == "space_not_found")
            #expect(try await env.call(.get, "/v1/spaces", as: puppet).items.isEmpty)
            #expect(try await env.call(.get, "/v1/spaces", as: maker).items.isEmpty)
            #expect(try await env.call(.get, "/v1/spaces/\(theirs)", as: maker).code == "space_not_found")
            let kept = try await env.call(.get, "/v1/spaces/\(theirs)", as: friend)
            #expect(kept.status == .ok && kept.json["permission"] as? String == "owner", "\(kept.text)")
            #expect(kept.json["pending_owner_id"] == nil || kept.json["pending_owner_id"] is NSNull, "the offer lapsed: \(kept.text)")
            #expect(try await env.count("SELECT count(*) FROM spaces WHERE id = '\(theirs)' AND pending_owner_id IS NULL") == 1)

            // The purchase is no longer the account's, and its token is new.
            let me = try await env.me(maker)
            #expect(me["tier"] as? String == "free", "\(me)")
            #expect(me["app_account_token"] as? String != oldToken)
            #expect(me[path: "limits.sources.used"] as? Int == 0, "the maker's usage does not count against the owner's limit: \(me)")
            try await waitUntil(.seconds(15)) {
                try await env.events("entitlement.changed").contains { $0["user_id"] as? String == maker.path && $0["tier"] as? String == "free" }
            }
            // Whoever paid restores it on an account of their own, under the token the purchase carries.
            let payer = try await env.user()
            let restored = try await env.buy(purchase, as: payer)
            #expect(restored.status == .ok && restored.json["tier"] as? String == "team", "\(restored.text)")
            #expect(try await env.me(maker)["tier"] as? String == "free")
        }
    }

    /// A reset of a proven account (`maker_dropped: false`) keeps the spaces and the purchase.
    @Test func aResetOfAProvenAccountKeepsEverything() async throws {
        try await Env.run { env in
            let owner = try await env.user()
            let token = try #require(try await env.me(owner)["app_account_token"] as? String)
            #expect(try await env.buy(try await env.transaction("com.researchapp.team.monthly", original: "3000000002", for: owner), as: owner).status == .ok)
            let space = try await SpaceTests.space(env, of: owner)
            try await env.publish(UserPasswordChanged(userID: owner.id, method: .reset, makerDropped: false), userID: owner.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM inbox WHERE type = 'user.password_changed'") == 1 }
            #expect(try await env.call(.get, "/v1/spaces/\(space)", as: owner).status == .ok)
            let me = try await env.me(owner)
            #expect(me["tier"] as? String == "team" && me["app_account_token"] as? String == token)
        }
    }
}
