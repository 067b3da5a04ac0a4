import Foundation
import Testing
import TestSupport

/// nutrition reads every shape every event type has had (`Tests/Fixtures/events`) through its own
/// handlers, and leaves alone, counted, a type or a version it does not know (docs/EVENTS.md).
@Suite struct NutritionEventContractTests {
    @Test func everyShapeOfEveryEventIsReadAndUnknownOnesAreLeftAlone() async throws {
        let admin = try RedisServer.freePort()
        try await NutritionTestEnvironment.run(["ADMIN_HTTP_PORT": String(admin)]) { env in
            let (delivered, failures) = try await checkConsumesEveryFixture(
                service: "nutrition", stream: env.config.events.stream, database: env.database, adminPort: admin,
                consumes: [
                    "user.registered", "profile.updated", "invitation.accepted", "client.unlinked", "user.password_changed", "entitlement.changed", "entitlement.catalog_changed", "user.deleted",
                ], newerVersionOf: "entitlement.changed")
            #expect(failures.isEmpty, "\(failures)")
            // The newer of the two entitlement.changed shapes is the client's tier, by the producer's order.
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(delivered.id(EventFixture.client))'") == 1)
            #expect(try await env.count("SELECT count(*) FROM user_limits WHERE user_id = '\(delivered.id(EventFixture.client))' AND tier = 'pro'") == 1)
            #expect(try await env.count("SELECT count(*) FROM limit_defaults WHERE tier = 'free'") == 1)
        }
    }
}
