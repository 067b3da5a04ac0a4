import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Models
import NIOCore
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitRedis
import Testing
import TestSupport
@testable import Training

/// One running training service for a test: its own database and Redis stream, access tokens from a
/// test issuer whose JWKS the service fetches over HTTP.
struct TrainingTestEnvironment: ServiceHarness {
    let serviceName = "training"
    let client: any TestClientProtocol
    let issuer: TestIssuer
    let database: TestDatabase
    let config: ServiceConfig
    let redis: RedisClient

    /// How long the service waits for a roster event still on its way (`ROSTER_WAIT_MS`), in tests:
    /// longer than in production, as a full parallel run on two cores can keep an event from the
    /// consumer for seconds, and a test that reads before publishing must not see the wait run out.
    static let rosterWait = Duration.seconds(10)

    static func run(_ environment: [String: String] = [:], _ body: @Sendable (TrainingTestEnvironment) async throws -> Void) async throws {
        let environment = ["ROSTER_WAIT_MS": "\(rosterWait.components.seconds * 1000)"].merging(environment) { _, given in given }
        try await runService("training", environment: environment, migrations: TrainingService.definition.allMigrations, build: buildApplication) { service in
            // Its tests plan, log and count by the day.
            try await clearOfTheHoursEnd()
            try await body(TrainingTestEnvironment(client: service.client, issuer: service.issuer, database: service.database, config: service.config, redis: service.redis))
        }
    }

    struct User: BearerHolder {
        let id: UUID
        let token: String
        var path: String { id.uuidString.lowercased() }
    }

    func user(roles: [Role] = [.user]) async throws -> User {
        let id = UUID()
        return User(id: id, token: try await issuer.token(userID: id, roles: roles))
    }

    func coach() async throws -> User { try await user(roles: [.user, .coach]) }
    func client() async throws -> User { try await user(roles: [.user, .client]) }

    /// Links a client to a coach as invitations' acceptance does in this schema.
    func link(coach: User, client: User) async throws {
        try await execute("INSERT INTO coach_links (coach_id, client_id) VALUES ('\(coach.id)', '\(client.id)')")
    }

    /// The id of the library's exercise of that name.
    func libraryExercise(_ name: String) async throws -> String {
        let reply = try await call(.get, "/v1/exercises?q=\(name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? name)&limit=100", as: try await user())
        guard let id = reply.items.first(where: { $0["name"] as? String == name })?["id"] as? String else {
            throw LookupFailed(description: "no library exercise named \(name)")
        }
        return id
    }

    struct LookupFailed: Error, CustomStringConvertible { var description: String }

    /// A workout body of `blocks` blocks of `sets` sets of the exercise.
    static func workout(_ exercise: String, name: String = "Push day", blocks: Int = 1, sets: Int = 3) -> [String: Any] {
        [
            "name": name,
            "blocks": (0..<blocks).map { _ in
                ["exercise_id": exercise, "sets": (0..<sets).map { _ in ["reps": 8, "weight_kg": 60.5, "rpe": 8, "rest_s": 90] as [String: Any] }] as [String: Any]
            },
        ]
    }
}
