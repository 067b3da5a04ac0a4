import ServiceKit
import ServiceKitDatabase
import ServiceKitEvents
import Testing
import TestSupport
@testable import Training

@Suite struct TrainingServiceTests {
    /// The executable's own build function boots against real PostgreSQL and Redis: migrations into
    /// its schema (the exercise library's with them), readiness, health, metrics and problem+json
    /// for unknown paths, and the routes served are the ones `openapi.yaml` documents.
    @Test func bootsAndServesHealth() async throws {
        let failures = try await assertServiceServesHealth(name: "training", build: buildApplication)
        #expect(failures.isEmpty, "\(failures)")
    }
}
