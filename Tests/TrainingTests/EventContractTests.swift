import Foundation
import Testing
import TestSupport

/// training reads every shape every event type has had (`Tests/Fixtures/events`) through its own
/// handlers, and leaves alone, counted, a type or a version it does not know (docs/EVENTS.md).
@Suite struct TrainingEventContractTests {
    @Test func everyShapeOfEveryEventIsReadAndUnknownOnesAreLeftAlone() async throws {
        let admin = try RedisServer.freePort()
        try await TrainingTestEnvironment.run(["ADMIN_HTTP_PORT": String(admin)]) { env in
            let (delivered, failures) = try await checkConsumesEveryFixture(
                service: "training", stream: env.config.events.stream, database: env.database, adminPort: admin,
                consumes: ["client.invited", "invitation.accepted", "client.unlinked", "client.removed", "user.password_changed", "user.deleted"], newerVersionOf: "client.invited")
            #expect(failures.isEmpty, "\(failures)")
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(delivered.id(EventFixture.rosterEntry))' AND client_id = '\(delivered.id(EventFixture.client))'") == 1)
        }
    }
}
