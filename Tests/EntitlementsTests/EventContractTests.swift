import Foundation
import Testing
import TestSupport

/// entitlements reads every shape every event type has had (`Tests/Fixtures/events`) through its own
/// handlers, and leaves alone, counted, a type or a version it does not know (docs/EVENTS.md).
@Suite struct EntitlementsEventContractTests {
    @Test func everyShapeOfEveryEventIsReadAndUnknownOnesAreLeftAlone() async throws {
        let admin = try RedisServer.freePort()
        try await EntitlementsTestEnvironment.run(["ADMIN_HTTP_PORT": String(admin)]) { env in
            let (delivered, failures) = try await checkConsumesEveryFixture(
                service: "entitlements", stream: env.config.events.stream, database: env.database, adminPort: admin,
                consumes: [
                    "user.registered", "user.email_verified", "user.roles_changed", "user.status_changed", "user.password_changed", "user.deleted", "block.created", "block.removed",
                ], newerVersionOf: "user.deleted")
            #expect(failures.isEmpty, "\(failures)")
            #expect(try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(delivered.id(EventFixture.client))'") == 1)
        }
    }
}
