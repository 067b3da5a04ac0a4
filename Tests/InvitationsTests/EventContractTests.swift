import Foundation
import Testing
import TestSupport

/// invitations reads every shape every event type has had (`Tests/Fixtures/events`) through its own
/// handlers, and leaves alone, counted, a type or a version it does not know (docs/EVENTS.md).
@Suite struct InvitationsEventContractTests {
    @Test func everyShapeOfEveryEventIsReadAndUnknownOnesAreLeftAlone() async throws {
        let admin = try RedisServer.freePort()
        try await InvitationsTestEnvironment.run(["ADMIN_HTTP_PORT": String(admin)]) { env in
            let (delivered, failures) = try await checkConsumesEveryFixture(
                service: "invitations", stream: env.config.events.stream, database: env.database, adminPort: admin,
                consumes: ["user.registered", "user.signed_in", "user.email_verified", "user.roles_changed", "user.password_changed", "user.deleted", "profile.updated"], newerVersionOf: "user.deleted"
            )
            #expect(failures.isEmpty, "\(failures)")
            #expect(try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(delivered.id(EventFixture.client))' AND display_name = 'Kim'") == 1)
        }
    }
}
