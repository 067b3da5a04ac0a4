import AppStoreServer
import Foundation
import PostgresNIO
@testable import Entitlements
import ServiceKit
import Testing
import TestSupport

/// With `APPLE_ENVIRONMENT=Production`, sandbox purchases (TestFlight, App Review) give no tier
/// unless `APPLE_ACCEPT_SANDBOX=true`.
@Suite struct SandboxPurchaseTests {
    typealias Env = EntitlementsTestEnvironment

    /// A production deployment names the App Store's environment: left to its default (sandbox),
    /// every live purchase would be refused and every TestFlight one would give a tier.
    @Test func productionNamesTheAppStoresEnvironment() throws {
        let production = [
            "APP_ENV": "production", "DATABASE_URL": "postgres://entitlements:secret@db:5432/foodbackend", "REDIS_URL": "redis://redis:6379",
            "JWKS_URL": "http://auth:8080/.well-known/jwks.json", "JWT_ISSUER": "https://api.example.com", "APPLE_BUNDLE_ID": "com.example.app",
            "APPLE_APP_APPLE_ID": "1234567890",
        ]
        let config = try ServiceConfig.load(name: "entitlements", defaultPort: 8084, environment: production)
        let error = #expect(throws: ConfigurationError.self) { try EntitlementsSettings(config) }
        #expect(String(describing: error).contains("APPLE_ENVIRONMENT: is required when APP_ENV=production"), "\(String(describing: error))")
        let named = try EntitlementsSettings(try ServiceConfig.load(name: "entitlements", defaultPort: 8084, environment: production.merging(["APPLE_ENVIRONMENT": "production"]) { $1 }))
        #expect(named.appStore.environment == .production && !named.acceptsSandbox)
    }

    @Test func sandboxPurchasesGiveNothingInProduction() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let refused = try await env.buy(try await env.transaction(original: "1000000040", for: user, environment: .sandbox), as: user)
            #expect(refused.status == .forbidden && refused.code == "sandbox_not_accepted", "\(refused.text)")
            let restore = try await env.call(
                .post, "/v1/purchases/apple/restore", as: user,
                json: ["signed_transactions": [try env.appStore.sign(try await env.transaction(original: "1000000041", for: user, environment: .sandbox))]])
            #expect(restore.status == .forbidden && restore.code == "sandbox_not_accepted", "\(restore.text)")
            #expect(try await env.me(user)["tier"] as? String == "free")

            // A sandbox notification is acknowledged (Apple stops sending it) and changes nothing.
            let sandbox = try await env.transaction(original: "1000000042", for: user, environment: .sandbox)
            let delivered = try await env.deliver(try env.notification("SUBSCRIBED", subtype: "INITIAL_BUY", transaction: sandbox, renewal: env.renewal(sandbox)))
            #expect(delivered.status == .ok && delivered.json["applied"] as? Bool == false, "\(delivered.text)")
            #expect(try await env.me(user)["tier"] as? String == "free")
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE original_transaction_id LIKE '100000004%'") == 0)
            #expect(try await env.count("SELECT count(*) FROM notifications WHERE environment = 'Sandbox'") == 1, "recorded")

            // App Store purchases count as ever.
            let bought = try await env.buy(try await env.transaction(original: "1000000043", for: user), as: user)
            #expect(bought.status == .ok && bought.json["tier"] as? String == "pro" && bought.json["is_sandbox"] as? Bool == false, "\(bought.text)")
        }
    }

    @Test func acceptSandboxLetsTestFlightPurchasesCount() async throws {
        try await Env.run(["APPLE_ACCEPT_SANDBOX": "true"]) { env in
            let user = try await env.user()
            let bought = try await env.buy(try await env.transaction(original: "1000000050", for: user, environment: .sandbox), as: user)
            #expect(bought.status == .ok && bought.json["tier"] as? String == "pro" && bought.json["is_sandbox"] as? Bool == true, "\(bought.text)")
            let other = try await env.user()
            let sandbox = try await env.transaction(original: "1000000051", for: other, environment: .sandbox)
            let delivered = try await env.deliver(try env.notification("SUBSCRIBED", subtype: "INITIAL_BUY", transaction: sandbox, renewal: env.renewal(sandbox)))
            #expect(delivered.status == .ok && delivered.json["applied"] as? Bool == true, "\(delivered.text)")
            #expect(try await env.me(other)["tier"] as? String == "pro")
        }
    }

    /// `APPLE_ACCEPT_SANDBOX` turned off and the service started again, the process before still
    /// running, as in a rolling restart: a TestFlight subscription bought while it was on gives
    /// nothing, as a new one would not, and the other services are told once; the process before does
    /// not announce it back, nor is an App Store customer told anything. Turned on again, it counts
    /// again.
    @Test func sandboxSubscriptionsStopCountingOnceTheSettingIsOff() async throws {
        // Every process sweeps five times a second: were the one a restart replaces to sweep for its
        // own setting, the user would be told one tier and the other over and over.
        let often = ["ENTITLEMENT_EXPIRY_SWEEP_MS": "200"]
        try await Env.run(often.merging(["APPLE_ACCEPT_SANDBOX": "true"]) { $1 }) { before in
            let tester = try await before.user()
            let bought = try await before.buy(try await before.transaction(original: "1000000060", for: tester, environment: .sandbox), as: tester)
            #expect(bought.status == .ok && bought.json["tier"] as? String == "pro" && bought.json["is_sandbox"] as? Bool == true, "\(bought.text)")
            let customer = try await before.user()
            let paid = try await before.buy(try await before.transaction(original: "1000000061", for: customer), as: customer)
            #expect(paid.status == .ok && paid.json["tier"] as? String == "pro", "\(paid.text)")
            #expect(try await before.count("SELECT count(*) FROM entitlement_announcements WHERE sandbox_counted") == 1)
            @Sendable func told(_ user: EntitlementsTestEnvironment.User) async throws -> [String] {
                try await before.events("entitlement.changed").filter { $0["user_id"] as? String == user.path }.compactMap { $0["tier"] as? String }
            }
            try await waitUntil(.seconds(15)) {
                let (testers, customers) = (try await told(tester), try await told(customer))
                return testers == ["pro"] && customers == ["pro"]
            }

            try await before.restarted(often.merging(["APPLE_ACCEPT_SANDBOX": "false"]) { $1 }) { after in
                try await waitUntil(.seconds(15)) { try await told(tester) == ["pro", "free"] }
                let me = try await after.me(try await after.signedIn(tester))
                #expect(me["tier"] as? String == "free" && me["is_sandbox"] as? Bool == false, "\(me)")
                let explained = try await after.call(.get, "/v1/admin/entitlements/\(tester.path)/explain", as: after.admin)
                let candidate = (explained.json["candidates"] as? [[String: Any]])?.first { $0["id"] as? String == "1000000060" }
                #expect(candidate?["counts"] as? Bool == false && (candidate?["reason"] as? String)?.contains("APPLE_ACCEPT_SANDBOX is off") == true, "\(explained.text)")
                #expect(try await after.me(try await after.signedIn(customer))["tier"] as? String == "pro")
                // Some sweeps of both processes later, nothing more was said.
                try await Task.sleep(for: .seconds(1))
                #expect(try await told(tester) == ["pro", "free"])
                #expect(try await after.count("SELECT count(*) FROM entitlement_announcements WHERE NOT sandbox_counted") == 1)

                try await after.restarted(often.merging(["APPLE_ACCEPT_SANDBOX": "true"]) { $1 }) { again in
                    try await waitUntil(.seconds(15)) { try await told(tester) == ["pro", "free", "pro"] }
                    #expect(try await again.me(try await again.signedIn(tester))["tier"] as? String == "pro")
                    try await Task.sleep(for: .seconds(1))
                    #expect(try await told(tester) == ["pro", "free", "pro"])
                    #expect(try await again.count("SELECT count(*) FROM entitlement_announcements WHERE sandbox_counted") == 1)
                }
            }
            #expect(try await told(customer) == ["pro"])
        }
    }

    /// A database from before sandbox purchases were weighed against the setting: its holders are
    /// recorded as announced with them counting (`0017`), so the first start with the setting off
    /// tells the other services, whichever process sweeps first.
    @Test func holdersFromBeforeTheSettingWasWeighedAreToldOnce() async throws {
        try await Env.run(["APPLE_ACCEPT_SANDBOX": "true", "ENTITLEMENT_EXPIRY_SWEEP_MS": "200"]) { before in
            let tester = try await before.user()
            #expect(try await before.buy(try await before.transaction(original: "1000000070", for: tester, environment: .sandbox), as: tester).status == .ok)
            @Sendable func told() async throws -> [String] {
                try await before.events("entitlement.changed").filter { $0["user_id"] as? String == tester.path }.compactMap { $0["tier"] as? String }
            }
            try await waitUntil(.seconds(15)) { try await told() == ["pro"] }
            // As the previous build left the row, then as the migration marks it.
            let sql = try #require(try EntitlementsService.definition.allMigrations().first { $0.name == "0017_sandbox_counted" }).sql
            let start = try #require(sql.range(of: "INSERT INTO entitlement_announcements")).lowerBound
            let marking = String(sql[start...])
            try await withClient(before.database.config(for: before.serviceName)) { client in
                try await client.query("UPDATE entitlement_announcements SET sandbox_counted = NULL", logger: TestEnvironment.logger)
                try await client.query(PostgresQuery(unsafeSQL: marking), logger: TestEnvironment.logger)
            }
            #expect(try await before.count("SELECT count(*) FROM entitlement_announcements WHERE sandbox_counted") == 1)
            try await before.restarted(["APPLE_ACCEPT_SANDBOX": "false", "ENTITLEMENT_EXPIRY_SWEEP_MS": "200"]) { _ in
                try await waitUntil(.seconds(15)) { try await told() == ["pro", "free"] }
                try await Task.sleep(for: .seconds(1))
                #expect(try await told() == ["pro", "free"])
            }
        }
    }
}
