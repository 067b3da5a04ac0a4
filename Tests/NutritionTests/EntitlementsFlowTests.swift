import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Models
@testable import Nutrition
import ServiceKit
import Testing
import TestSupport

/// The caps as they travel between the two services: the entitlements executable, started as in
/// production against a database of its own and nutrition's Redis stream, announces its catalogue
/// and a user's new tier; nutrition keeps both, with no call between them.
@Suite struct EntitlementsFlowTests {
    @Test func entitlementsAnnouncesTheDefaultAndATierLiftsTheCapHere() async throws {
        try await NutritionTestEnvironment.run { env in
            let database = try await TestDatabase.create(services: ["entitlements"])
            let db = database.config(for: "entitlements")
            let port = try RedisServer.freePort()
            let adminPort = try RedisServer.freePort()
            let log = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("entitlements-log")).path
            defer { try? FileManager.default.removeItem(atPath: log) }
            let redis = try #require(ProcessInfo.processInfo.environment["TEST_REDIS_URL"])
            let environment = [
                "PATH": "/usr/bin:/bin", "APP_ENV": "test", "LOG_LEVEL": "info", "HTTP_PORT": String(port), "ADMIN_HTTP_PORT": String(adminPort),
                "DATABASE_URL": "postgres://\(db.user):\(db.password ?? "")@\(db.host):\(db.port)/\(db.database)", "DATABASE_POOL_SIZE": "4",
                "REDIS_URL": redis, "EVENTS_STREAM": env.config.events.stream, "JWKS_URL": env.issuer.jwksURL, "JWT_ISSUER": env.issuer.issuer,
                "JWT_AUDIENCE": env.issuer.audience,
            ]
            let child = try ChildProcess(
                [TestEnvironment.binDirectory.appendingPathComponent("entitlements").path], environment: environment, outputPath: log)
            do {
                try await Self.flow(env, child: child, port: port, log: log)
            } catch {
                child.signal(SIGKILL)
                _ = try? await child.wait(timeout: .seconds(5))
                throw error
            }
            child.signal(SIGTERM)
            _ = try? await child.wait(timeout: .seconds(20))
        }
    }

    static func flow(_ env: NutritionTestEnvironment, child: ChildProcess, port: Int, log: String) async throws {
        let serving = try await child.waitUntilServing(port: port, log: log, marker: "listening", within: .seconds(60))
        try #require(serving, "entitlements did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")

        // Its first start announces what a user nothing names has: the free tier's cap.
        let user = try await env.user()
        try await waitUntil(.seconds(30)) { try await env.count("SELECT count(*) FROM limit_defaults") == 1 }
        #expect(
            try await env.mealAnalysisAllowance(user) == MealAnalysisAllowance(tier: "free", cap: 3, upgradeTier: "pro", upgradeTierName: "Pro"))

        // The user (a customer there from auth's `user.registered` on the same stream) gets Pro.
        let adminID = UUID()
        let admin = try await env.issuer.token(userID: adminID, roles: [.user, .admin])
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/admin/entitlements/\(user.path)/grants")!)
        request.httpMethod = "POST"
        request.setValue("Bearer \(admin)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONSerialization.data(withJSONObject: [
            "tier": "pro", "until": ISO8601DateFormatter().string(from: Date() + 86_400), "reason": "cross-service test",
        ])
        let grant = request
        try await waitUntil(.seconds(30)) {
            let (_, response) = try await URLSession.shared.data(for: grant)
            return (response as? HTTPURLResponse)?.statusCode == 201
        }
        try await waitUntil(.seconds(30)) { try await env.mealAnalysisAllowance(user)?.tier == "pro" }
        #expect(try await env.mealAnalysisAllowance(user) == MealAnalysisAllowance(tier: "pro", cap: 100, upgradeTier: nil, upgradeTierName: nil))
    }
}
