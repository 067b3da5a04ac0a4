import Foundation
@testable import Entitlements
import Models
import Testing
import TestSupport

/// A deleted account's access token outlives it by up to 15 minutes. What it asks after
/// `user.deleted` makes no row that names the account, which nothing would ever remove.
@Suite struct DeletedAccountTokenTests {
    typealias Env = EntitlementsTestEnvironment

    @Test func aDeletedAccountsTokenMakesNothing() async throws {
        try await Env.run { env in
            let user = try await env.user()
            try await env.publish(UserDeleted(userID: user.id), userID: user.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(user.id)'") == 0 }

            let me = try await env.call(.get, "/v1/entitlements/me", as: user)
            #expect(me.status == .unauthorized && me.code == "account_deleted", "\(me.text)")
            let acquired = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 1])
            #expect(acquired.status == .unauthorized && acquired.code == "account_deleted", "\(acquired.text)")
            let space = try await env.call(.post, "/v1/spaces", as: user, json: ["name": "Left behind"])
            #expect(space.status == .unauthorized && space.code == "account_deleted", "\(space.text)")
            let bought = try await env.buy(try await env.transaction(original: "4000000000001"), as: user)
            #expect(bought.status == .unauthorized && bought.code == "account_deleted", "\(bought.text)")

            for table in ["customers", "usage_counters", "usage_acquisitions", "space_members", "entitlement_versions"] {
                #expect(try await env.count("SELECT count(*) FROM \(table) WHERE user_id = '\(user.id)'") == 0, "a row in \(table)")
            }
        }
    }

    /// A write made while the account's deletion runs waits for it, then finds the tombstone and makes
    /// nothing: without the wait, a purchase would write its subscription after the deletion's
    /// statements read, and the subscription would name the account.
    @Test func aWriteBesideTheDeletionWaitsAndMakesNothing() async throws {
        try await Env.run { env in
            let writes: [(name: String, write: @Sendable (Env.User) async throws -> APIReply)] = [
                ("purchase", { user in try await env.buy(try await env.transaction(original: "4000000000002"), as: user) }),
                ("usage", { user in try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 1]) }),
                ("space", { user in try await env.call(.post, "/v1/spaces", as: user, json: ["name": "Left behind"]) }),
            ]
            var users: [UUID] = []
            for (name, write) in writes {
                let user = try await env.user()
                users.append(user.id)
                let reply = try await env.whileDeleting(user.id) { try await write(user) }
                #expect(reply.status == .unauthorized && reply.code == "account_deleted", "\(name): \(reply.text)")
            }
            // A purchase naming, by its appAccountToken, an account being deleted: it waits, and the
            // purchase is the buyer's, naming nobody else.
            let tokenOwner = try await env.user()
            let buyer = try await env.user()
            let named = try await env.transaction(original: "4000000000003", for: tokenOwner)
            let bought = try await env.whileDeleting(tokenOwner.id) { try await env.buy(named, as: buyer) }
            #expect(bought.status == .ok, "\(bought.text)")
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE user_id = '\(buyer.id)'") == 1)
            users.append(tokenOwner.id)
            // An admin's grant to an account being deleted: it waits, then finds no such user.
            let granted = try await env.user()
            users.append(granted.id)
            let grant = try await env.whileDeleting(granted.id) { try await AdminStandingTests.grant(env, to: granted, as: env.admin) }
            #expect(grant.status == .notFound && grant.code == "user_not_found", "\(grant.text)")
            #expect(try await env.count("SELECT count(*) FROM grants WHERE user_id = '\(granted.id)'") == 0)
            let ids = users.map { "'\($0)'" }.joined(separator: ", ")
            for table in ["subscriptions", "transactions", "usage_counters", "usage_acquisitions", "space_members"] {
                #expect(try await env.count("SELECT count(*) FROM \(table) WHERE user_id IN (\(ids))") == 0, "a row in \(table)")
            }
        }
    }

    /// An event about an account whose deletion is running waits for it, then finds the tombstone
    /// and makes nothing: a registration's customer row, handled between the deletion's statements,
    /// would otherwise outlive the account.
    @Test func anEventBesideTheDeletionWaitsAndMakesNothing() async throws {
        try await Env.run { env in
            let user = UUID()
            try await env.whileDeleting(user) {
                try await env.publish(UserRegistered(userID: user, email: "late-\(user)@example.com", displayName: nil, provider: "email"), userID: user)
            }
            // A later event is handled after it: the registration has been handled by then.
            let marker = UUID()
            try await env.publish(UserRegistered(userID: marker, email: "marker-\(marker)@example.com", displayName: nil, provider: "email"), userID: marker)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(marker)'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(user)'") == 0)
        }
    }
}
