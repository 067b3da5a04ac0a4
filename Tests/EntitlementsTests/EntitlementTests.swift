import Crypto
import Foundation
import HTTPTypes
@testable import Entitlements
import Models
import Testing
import TestSupport

/// Tiers, `/me`, the feature check, usage limits and administrators' grants, through HTTP.
@Suite struct EntitlementTests {
    @Test func theCatalogueIsPublicAndShippedAsData() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let reply = try await env.call(.get, "/v1/tiers")
            #expect(reply.status == .ok)
            #expect(reply.items.map { $0["id"] as? String } == ["free", "academic", "pro", "team"])
            let free = try #require(reply.items.first)
            #expect((free["limits"] as? [String: Any])?["sources"] as? Int == 50)
            let pro = try #require(reply.items.first { $0["id"] as? String == "pro" })
            #expect(pro["price_text"] as? String == "$14.99/month")
            #expect((pro["limits"] as? [String: Any])?["sources"] is NSNull)
            #expect(pro["products"] as? [String] == ["com.researchapp.pro.monthly", "com.researchapp.pro.yearly"])
            let team = try #require(reply.items.first { $0["id"] as? String == "team" })
            #expect(Set(team["features"] as? [String] ?? []) == ["ai_suggestions", "cloud_sync", "collaboration", "meal_analysis"])
            // Photo analyses: a few a day free, many on any paid tier.
            #expect((free["limits"] as? [String: Any])?["meal_analyses_per_day"] as? Int == 3)
            #expect((pro["limits"] as? [String: Any])?["meal_analyses_per_day"] as? Int == 100)
        }
    }

    @Test func aCatalogueThatContradictsItselfStopsTheService() throws {
        var catalog = try Catalog.load(path: nil)
        catalog.tiers[1].features.append("teleportation")
        catalog.tiers[2].products.append("com.researchapp.academic.monthly")
        #expect(throws: Catalog.Invalid.self) { try catalog.validate() }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("\(UUID()).json")
        try Data("{\"tiers\": []}".utf8).write(to: file)
        #expect(throws: Catalog.Invalid.self) { try Catalog.load(path: file.path) }
    }

    /// The shipped default root is Apple Root CA - G3, by its published SHA-256 fingerprint.
    @Test func theShippedRootIsAppleRootCAG3() throws {
        let roots = try EntitlementsSettings.roots(nil)
        #expect(roots.count == 1)
        let der = try AppStoreIssuer.der(try #require(roots.first))
        let fingerprint = SHA256.hash(data: der).map { String(format: "%02X", $0) }.joined(separator: ":")
        #expect(fingerprint == "63:34:3A:BF:B8:9A:6A:03:EB:B5:7E:9B:3F:5F:A7:BE:7C:4F:5C:75:6F:30:17:B3:A8:C4:88:C3:65:3E:91:79")
    }

    @Test func aNewUserIsFreeWithAStableAccountToken() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            let me = try await env.me(user)
            #expect(me["tier"] as? String == "free" && me["source"] as? String == "free" && me["state"] as? String == "active")
            #expect(me["expires_at"] is NSNull && me["billing_issue"] as? Bool == false && me["is_sandbox"] as? Bool == false)
            #expect(me["features"] as? [String: Bool] == ["ai_suggestions": false, "cloud_sync": false, "collaboration": false, "meal_analysis": true])
            #expect((me[path: "limits.sources"] as? [String: Any])?["limit"] as? Int == 50)
            let token = try #require(me["app_account_token"] as? String)
            #expect(UUID(uuidString: token) != nil)
            #expect(try await env.me(user)["app_account_token"] as? String == token)
            #expect(try await env.call(.get, "/v1/entitlements/me").status == .unauthorized)
            let expired = try await env.issuer.token(userID: user.id, issuedAt: Date() - 3600, expiresIn: 60)
            #expect(try await env.call(.get, "/v1/entitlements/me", headers: [.authorization: "Bearer \(expired)"]).status == .unauthorized)
        }
    }

    /// Without the change feed, `/me` and the check read the user's version number and keep the
    /// inputs read for it. A change made behind the triggers' back is not seen until the version
    /// moves; every change to an input table (a grant, a usage counter, the customer's token) moves
    /// it, so the next read sees it.
    @Test func keptInputsServeUntilTheirVersionMoves() async throws {
        try await EntitlementsTestEnvironment.run(["ENTITLEMENT_CHANGE_FEED": "off"]) { env in
            let user = try await env.user()
            func check() async throws -> HTTPResponse.Status {
                try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": "ai_suggestions"]).status
            }
            try await env.grant(user, tier: "pro")
            #expect(try await env.me(user)["tier"] as? String == "pro")
            #expect(try await check() == .ok)
            try await env.execute("ALTER TABLE grants DISABLE TRIGGER grants_version_inputs")
            try await env.execute("UPDATE grants SET revoked_at = now() WHERE user_id = '\(user.id)'")
            try await env.execute("ALTER TABLE grants ENABLE TRIGGER grants_version_inputs")
            #expect(try await env.me(user)["tier"] as? String == "pro", "kept")
            #expect(try await check() == .ok, "kept")
            try await env.execute("SELECT entitlement_inputs_changed('\(user.id)')")
            #expect(try await env.me(user)["tier"] as? String == "free", "read again for the new version")
            #expect(try await check() == .forbidden, "read again for the new version")

            try await env.execute(
                "INSERT INTO grants (id, user_id, tier, until, reason, granted_by) VALUES (gen_random_uuid(), '\(user.id)', 'pro', now() + interval '1 day', 'sql', '\(user.id)')")
            #expect(try await check() == .ok, "a grant written in SQL")
            try await env.execute("INSERT INTO usage_counters (user_id, counter, used) VALUES ('\(user.id)', 'sources', 3)")
            #expect(try await env.me(user)[path: "limits.sources.used"] as? Int == 3, "usage")
            try await env.execute("UPDATE usage_counters SET used = 5 WHERE user_id = '\(user.id)'")
            #expect(try await env.me(user)[path: "limits.sources.used"] as? Int == 5, "usage again")
            let token = try await env.me(user)["app_account_token"] as? String
            try await env.execute("UPDATE customers SET app_account_token = gen_random_uuid() WHERE user_id = '\(user.id)'")
            #expect(try await env.me(user)["app_account_token"] as? String != token, "a new token")
            try await env.execute("DELETE FROM grants WHERE user_id = '\(user.id)'")
            #expect(try await check() == .forbidden, "the grants gone")
        }
    }

    /// The inputs' version is written when the transaction commits, after every lock it took on the
    /// way: a purchase, a notification and a deletion lock a user's rows in their own orders, and
    /// none holds the version row meanwhile.
    @Test func theInputsVersionIsWrittenAtTheCommit() async throws {
        try await EntitlementsTestEnvironment.run(["ENTITLEMENT_CHANGE_FEED": "off"]) { env in
            let user = try await env.user()
            try await env.grant(user, tier: "pro")
            let version = "SELECT version FROM entitlement_versions WHERE user_id = '\(user.id)'"
            let before = try await env.count(version)
            try await withClient(env.database.config(for: env.serviceName)) { client in
                try await client.withTransaction(logger: TestEnvironment.logger) { connection in
                    _ = try await connection.query("UPDATE grants SET revoked_at = now() WHERE user_id = \(user.id)", logger: TestEnvironment.logger)
                    // Another connection takes the row at once: this transaction holds no lock on it.
                    try await env.execute("SELECT 1 FROM entitlement_versions WHERE user_id = '\(user.id)' FOR UPDATE NOWAIT")
                    #expect(try await env.count(version) == before, "not yet")
                }
            }
            #expect(try await env.count(version) != before, "written at the commit")
            #expect(try await env.me(user)["tier"] as? String == "free")
        }
    }

    /// With the change feed, kept inputs are served without reading anything: the version table can
    /// be gone and `/me` and the check still answer. Each change to an input table, made in SQL, is
    /// announced at its commit and seen shortly after; one made through the service is seen by its
    /// next request at once.
    @Test func theChangeFeedServesKeptInputsUntilAChangeIsAnnounced() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            @Sendable func check() async throws -> HTTPResponse.Status {
                try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": "ai_suggestions"]).status
            }
            try await env.grant(user, tier: "pro")
            #expect(try await check() == .ok, "seen at once after the grant")
            // Kept by one read while the table is there, then served with it gone: once the feed
            // vouches (before that, the version read fails), and when no forgetting refused the keeping.
            try await waitUntil {
                try await env.execute("ALTER TABLE IF EXISTS entitlement_versions_away RENAME TO entitlement_versions")
                guard try await check() == .ok else { return false }
                try await env.execute("ALTER TABLE entitlement_versions RENAME TO entitlement_versions_away")
                guard try await check() == .ok else { return false }
                let me = try await env.call(.get, "/v1/entitlements/me", as: user)
                return me.status == .ok && me.json["tier"] as? String == "pro"
            }
            try await env.execute("ALTER TABLE entitlement_versions_away RENAME TO entitlement_versions")

            try await env.execute("UPDATE grants SET revoked_at = now() WHERE user_id = '\(user.id)'")
            try await waitUntil { try await check() == .forbidden }
            try await env.execute(
                "INSERT INTO grants (id, user_id, tier, until, reason, granted_by) VALUES (gen_random_uuid(), '\(user.id)', 'pro', now() + interval '1 day', 'sql', '\(user.id)')")
            try await waitUntil { try await check() == .ok }
            try await env.execute("INSERT INTO usage_counters (user_id, counter, used) VALUES ('\(user.id)', 'sources', 3)")
            try await waitUntil { try await env.me(user)[path: "limits.sources.used"] as? Int == 3 }
            let token = try await env.me(user)["app_account_token"] as? String
            try await env.execute("UPDATE customers SET app_account_token = gen_random_uuid() WHERE user_id = '\(user.id)'")
            try await waitUntil { try await env.me(user)["app_account_token"] as? String != token }

            // Through the service: its next request sees the change without the feed, since the process
            // forgets what it kept when the change commits. With the counters' trigger off, nothing is
            // announced; a count changed in SQL then is not seen, which shows the inputs are kept.
            try await waitUntil {
                try await env.execute("ALTER TABLE usage_counters ENABLE TRIGGER usage_counters_version_inputs")
                try await env.execute("UPDATE usage_counters SET used = 3 WHERE user_id = '\(user.id)'")
                try await waitUntil { try await env.me(user)[path: "limits.sources.used"] as? Int == 3 }
                try await env.execute("ALTER TABLE usage_counters DISABLE TRIGGER usage_counters_version_inputs")
                try await env.execute("UPDATE usage_counters SET used = 10 WHERE user_id = '\(user.id)'")
                return try await env.me(user)[path: "limits.sources.used"] as? Int == 3
            }
            let acquired = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: [:])
            #expect(acquired.status == .ok && acquired.json["used"] as? Int == 11, "\(acquired.text)")
            #expect(try await env.me(user)[path: "limits.sources.used"] as? Int == 11)
            try await env.execute("ALTER TABLE usage_counters ENABLE TRIGGER usage_counters_version_inputs")
        }
    }

    /// A `TRUNCATE` of an input table names no user: every version moves (seen at once by a read of
    /// the version) and every process forgets what it kept (seen by a process whose feed vouches,
    /// which reads no version: before the truncate it served kept inputs with the version table gone).
    @Test(arguments: ["on", "off"]) func aTruncatedInputTableIsSeen(changeFeed: String) async throws {
        try await EntitlementsTestEnvironment.run(["ENTITLEMENT_CHANGE_FEED": changeFeed]) { env in
            let user = try await env.user()
            @Sendable func check() async throws -> HTTPResponse.Status {
                try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": "ai_suggestions"]).status
            }
            try await env.grant(user, tier: "pro")
            #expect(try await check() == .ok)
            if changeFeed == "on" {
                try await waitUntil {
                    try await env.execute("ALTER TABLE IF EXISTS entitlement_versions_away RENAME TO entitlement_versions")
                    guard try await check() == .ok else { return false }
                    try await env.execute("ALTER TABLE entitlement_versions RENAME TO entitlement_versions_away")
                    return try await check() == .ok
                }
                try await env.execute("ALTER TABLE entitlement_versions_away RENAME TO entitlement_versions")
            }
            try await env.execute("TRUNCATE grants")
            if changeFeed == "on" {
                try await waitUntil { try await check() == .forbidden }
            } else {
                #expect(try await check() == .forbidden)
            }
        }
    }

    @Test func theCheckAnswersAllowedOrRequiresUpgradeInTheCataloguesWords() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            let refused = try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": "ai_suggestions"])
            #expect(refused.status == .forbidden && refused.code == "requires_upgrade")
            #expect(refused.json["feature"] as? String == "ai_suggestions" && refused.json["required_tier"] as? String == "pro")
            #expect(refused.json["detail"] as? String == "AI Suggestions requires Pro. Upgrade to unlock.")
            #expect(refused.headers[.contentType] == "application/problem+json")
            try await env.grant(user, tier: "pro")
            let allowed = try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": "ai_suggestions"])
            #expect(allowed.status == .ok && allowed.json["allowed"] as? Bool == true)
            let team = try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": "collaboration"])
            #expect(team.code == "requires_upgrade" && team.json["required_tier"] as? String == "team")
            #expect(try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": "flying"]).code == "unknown_feature")
            #expect(try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": 7]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/entitlements/check", as: user, json: ["feature": "cloud_sync", "tier": "team"]).status == .badRequest)
            let malformed = try await env.call(.post, "/v1/entitlements/check", as: user, raw: .init(string: "{\"feature\":"), headers: [.contentType: "application/json"])
            #expect(malformed.status == .badRequest && malformed.code == "malformed_json")
            #expect(try await env.call(.post, "/v1/entitlements/check", json: ["feature": "cloud_sync"]).status == .unauthorized)
        }
    }

    @Test func aGrantGivesTheTierUntilItIsTakenBackAndEveryChangeIsAnnounced() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            let id = try await env.grant(user, tier: "team", days: 1)
            var me = try await env.me(user)
            #expect(me["tier"] as? String == "team" && me["source"] as? String == "grant")
            try await waitUntil(.seconds(15)) { try await env.events("entitlement.changed").contains { $0["user_id"] as? String == user.path && $0["tier"] as? String == "team" } }
            env.clock.advance(2 * 86_400)
            me = try await env.me(user)
            #expect(me["tier"] as? String == "free", "a grant ends at its date, decided when read")
            env.clock.advance(-2 * 86_400)
            let reply = try await env.call(.delete, "/v1/admin/entitlements/\(user.path)/grants/\(id)", as: env.admin)
            #expect(reply.status == .noContent)
            #expect(try await env.me(user)["tier"] as? String == "free")
            #expect(try await env.call(.delete, "/v1/admin/entitlements/\(user.path)/grants/\(id)", as: env.admin).code == "grant_not_found")
            let explain = try await env.call(.get, "/v1/admin/entitlements/\(user.path)/explain", as: env.admin)
            #expect(explain.status == .ok)
            let kinds = (explain.json["history"] as? [[String: Any]] ?? []).compactMap { $0["kind"] as? String }
            #expect(kinds == ["grant", "grant_revoked"])
            // Only administrators, and only sensible grants.
            #expect(try await env.call(.post, "/v1/admin/entitlements/\(user.path)/grants", as: user, json: ["tier": "pro", "until": "2030-01-01T00:00:00Z", "reason": "me"]).status == .forbidden)
            #expect(try await env.call(.get, "/v1/admin/entitlements/\(user.path)/explain", as: user).status == .forbidden)
            let bad = try await env.call(.post, "/v1/admin/entitlements/\(user.path)/grants", as: env.admin, json: ["tier": "free", "until": "2001-01-01T00:00:00Z", "reason": ""])
            #expect(Set(bad.fieldErrors) == ["tier", "until", "reason"])
            #expect(try await env.call(.post, "/v1/admin/entitlements/not-a-user/grants", as: env.admin, json: ["tier": "pro", "until": "2030-01-01T00:00:00Z", "reason": "x"]).status == .notFound)
        }
    }

    /// A counter without a cap (a paid tier's) counts on past what a 32-bit integer holds.
    @Test func anUncappedCountGoesPastTwoBillion() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            _ = try await env.grant(user, tier: "pro")
            let first = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 10])
            #expect(first.status == .ok && (first.json["limit"] == nil || first.json["limit"] is NSNull), "\(first.text)")
            try await env.execute("UPDATE usage_counters SET used = 2147483000 WHERE user_id = '\(user.id)'")
            let past = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 10000])
            #expect(past.status == .ok && past.json["used"] as? Int == 2_147_493_000, "\(past.text)")
            let released = try await env.call(.post, "/v1/usage/sources/release", as: user, json: ["acquisition_ids": [past.json["acquisition_id"] as? String ?? ""]])
            #expect(released.status == .ok && released.json["used"] as? Int == 2_147_483_000, "\(released.text)")
        }
    }

    @Test func usageStopsAtTheLimitAndReleasesOnlyTheCallersAcquisitions() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            let other = try await env.user()
            var ids: [String] = []
            let first = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 48])
            #expect(first.status == .ok && first.json["used"] as? Int == 48 && first.json["limit"] as? Int == 50)
            ids.append(try #require(first.json["acquisition_id"] as? String))
            let more = try await env.call(.post, "/v1/usage/sources/acquire", as: user)
            #expect(more.json["used"] as? Int == 49)
            ids.append(try #require(more.json["acquisition_id"] as? String))
            let tooMany = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 2])
            #expect(tooMany.status == .forbidden && tooMany.code == "limit_exceeded")
            #expect(tooMany.json["detail"] as? String == "You've reached the limit of 50 sources. Upgrade to Pro for unlimited.")
            #expect(tooMany.json["limit"] as? Int == 50 && tooMany.json["upgrade_tier"] as? String == "pro")
            // Another user cannot release these; the owner releases exactly what was acquired.
            let foreign = try await env.call(.post, "/v1/usage/sources/release", as: other, json: ["acquisition_ids": ids])
            #expect(foreign.status == .ok && (foreign.json["released"] as? [String] ?? []).isEmpty)
            let released = try await env.call(.post, "/v1/usage/sources/release", as: user, json: ["acquisition_ids": [ids[1]]])
            #expect(released.json["used"] as? Int == 48)
            let version = "SELECT version FROM entitlement_versions WHERE user_id = '\(user.id)'"
            let before = try await env.count(version)
            let again = try await env.call(.post, "/v1/usage/sources/release", as: user, json: ["acquisition_ids": [ids[1]]])
            #expect(again.json["used"] as? Int == 48, "a release counts once")
            #expect(try await env.count(version) == before, "and a release of nothing changes no version")
            #expect(try await env.call(.post, "/v1/usage/sources/release", as: user, json: ["amount": 48]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 0]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": "1"]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/usage/planets/acquire", as: user).code == "unknown_counter")
            // A limit nutrition counts per day has no counter here: one kept here would never start a new day.
            let daily = try await env.call(.post, "/v1/usage/meal_analyses_per_day/acquire", as: user)
            #expect(daily.status == .notFound && daily.code == "unknown_counter" && daily.text.contains("nutrition"), "\(daily.text)")
            #expect(try await env.call(.post, "/v1/usage/meal_analyses_per_day/release", as: user, json: ["acquisition_ids": [UUID().uuidString]]).code == "unknown_counter")
            // A retried acquisition with the same Idempotency-Key counts once.
            let key: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "acquire-\(UUID())"]
            let once = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 1], headers: key)
            let twice = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 1], headers: key)
            #expect(once.json["acquisition_id"] as? String == twice.json["acquisition_id"] as? String)
            #expect(try await env.me(user)[path: "limits.sources.used"] as? Int == 49)
        }
    }

    /// A hundred acquisitions at once at 49 of 50: exactly one succeeds.
    @Test func parallelAcquisitionsAtTheEdgeGiveExactlyOneSuccess() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            #expect(try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 49]).status == .ok)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<100 { group.addTask { try await env.concurrentCall(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 1]) } }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .ok }.count == 1)
            #expect(statuses.filter { $0 == .forbidden }.count == 99)
            #expect(try await env.count("SELECT used FROM usage_counters WHERE user_id = '\(user.id)'") == 50)
        }
    }

    /// Downgrading below what is used keeps it all and refuses more.
    @Test func aDowngradeBelowUsageKeepsWhatExistsAndRefusesMore() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            try await env.grant(user, tier: "pro")
            let big = try await env.call(.post, "/v1/usage/sources/acquire", as: user, json: ["amount": 70])
            #expect(big.status == .ok && big.json["limit"] is NSNull)
            try await env.revokeGrants(user)
            let me = try await env.me(user)
            #expect(me[path: "limits.sources.used"] as? Int == 70 && me[path: "limits.sources.limit"] as? Int == 50)
            #expect(try await env.call(.post, "/v1/usage/sources/acquire", as: user).code == "limit_exceeded")
        }
    }
}
