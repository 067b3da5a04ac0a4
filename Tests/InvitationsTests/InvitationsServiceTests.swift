@testable import Invitations
import ServiceKit
import ServiceKitDatabase
import ServiceKitEvents
import Testing
import TestSupport

@Suite struct InvitationsServiceTests {
    /// The executable's own build function boots against real PostgreSQL and Redis: migrations into
    /// its schema, readiness, health, metrics and problem+json for unknown paths.
    @Test func bootsAndServesHealth() async throws {
        let failures = try await assertServiceServesHealth(name: "invitations", build: buildApplication)
        #expect(failures.isEmpty, "\(failures)")
    }
}
