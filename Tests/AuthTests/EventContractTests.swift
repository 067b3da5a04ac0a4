import Foundation
import Testing
import TestSupport

/// auth reads every shape every event type has had (`Tests/Fixtures/events`) through its own
/// handlers, and leaves alone, counted, a type or a version it does not know (docs/EVENTS.md).
@Suite struct AuthEventContractTests {
    @Test func everyShapeOfEveryEventIsReadAndUnknownOnesAreLeftAlone() async throws {
        let admin = try RedisServer.freePort()
        try await AuthTestEnvironment.run(["ADMIN_HTTP_PORT": String(admin)]) { env in
            let (delivered, failures) = try await checkConsumesEveryFixture(
                service: "auth", stream: env.config.events.stream, database: env.database, adminPort: admin,
                consumes: ["invitation.accepted", "client.unlinked"], newerVersionOf: "client.unlinked")
            #expect(failures.isEmpty, "\(failures)")
            _ = delivered
        }
    }
}
