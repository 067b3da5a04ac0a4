import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Models
import NIOCore
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
@testable import Social
import Testing
import TestSupport

/// One running social service for a test: its own database and Redis stream, access tokens from a
/// test issuer whose JWKS the service fetches over HTTP, events put on the stream as auth would.
struct SocialTestEnvironment: ServiceHarness {
    let serviceName = "social"
    let client: any TestClientProtocol
    let issuer: TestIssuer
    let database: TestDatabase
    let config: ServiceConfig
    let redis: RedisClient

    /// `imageDecoding`: the process's decode slots, for a test that holds them.
    static func run(
        _ environment: [String: String] = [:], imageDecoding: ImageDecoding? = nil, _ body: @Sendable (SocialTestEnvironment) async throws -> Void
    ) async throws {
        let definition = SocialService.configured(imageDecoding: imageDecoding)
        func build(_ config: ServiceConfig) throws -> some ApplicationProtocol { try buildServiceApplication(definition, config: config) }
        try await runService("social", environment: environment, migrations: SocialService.definition.allMigrations, build: build) { service in
            try await body(SocialTestEnvironment(client: service.client, issuer: service.issuer, database: service.database, config: service.config, redis: service.redis))
        }
    }

    // MARK: users and events

    struct User: BearerHolder {
        let id: UUID
        let token: String
        /// The id as the API writes it in paths.
        var path: String { id.uuidString.lowercased() }
    }

    /// A signed-up user: `user.registered` is put on the stream and the profile awaited, as after a
    /// real sign-up. `registered: false` leaves the event out (the profile is then made lazily).
    func user(_ name: String? = nil, roles: [Role] = [.user], registered: Bool = true) async throws -> User {
        let id = UUID()
        if registered {
            try await publish(UserRegistered(userID: id, email: "\(id)@example.com", displayName: name, provider: "email"), userID: id)
            try await waitUntil(.seconds(15)) { try await count("SELECT count(*) FROM profiles WHERE user_id = '\(id)'") == 1 }
        }
        return User(id: id, token: try await issuer.token(userID: id, roles: roles))
    }

    /// Puts an event on the service's stream exactly as a producer's relay does.
    func publish<Payload: EventPayload>(_ payload: Payload, userID: UUID?, occurredAt: Date = Date(), sequence: Int64? = nil) async throws {
        try await EventStream(redis: redis, name: config.events.stream).publish(payload, producer: "auth", userID: userID, occurredAt: occurredAt, sequence: sequence)
    }

    /// Events the service has relayed to the stream, of one type.
    func events(_ type: String) async throws -> [[String: Any]] {
        try await EventStream(redis: redis, name: config.events.stream).envelopes(type)
    }

    // MARK: HTTP

    typealias Reply = APIReply

    func profile(_ target: User, as viewer: User) async throws -> Reply {
        try await call(.get, "/v1/profiles/\(target.path)", as: viewer)
    }

    func follow(_ target: User, as viewer: User) async throws -> Reply {
        try await call(.post, "/v1/profiles/\(target.path)/follow", as: viewer)
    }

    // MARK: database

}
