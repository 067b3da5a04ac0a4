import Foundation
import Testing
import TestSupport

/// social reads every shape every event type has had (`Tests/Fixtures/events`) through its own
/// handlers, and leaves alone, counted, a type or a version it does not know (docs/EVENTS.md).
@Suite struct SocialEventContractTests {
    @Test func everyShapeOfEveryEventIsReadAndUnknownOnesAreLeftAlone() async throws {
        let admin = try RedisServer.freePort()
        try await SocialTestEnvironment.run(["ADMIN_HTTP_PORT": String(admin)]) { env in
            let (delivered, failures) = try await checkConsumesEveryFixture(
                service: "social", stream: env.config.events.stream, database: env.database, adminPort: admin,
                consumes: ["user.registered", "user.roles_changed", "user.password_changed", "user.deleted"], newerVersionOf: "user.deleted")
            #expect(failures.isEmpty, "\(failures)")
            // The client registered and stays; alice was deleted and leaves only her tombstone.
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(delivered.id(EventFixture.client))'") == 1)
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(delivered.id(EventFixture.alice))'") == 0)
            #expect(try await env.count("SELECT count(*) FROM deleted_accounts") == 1)
        }
    }
}
