import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
@testable import Invitations
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
import Testing
import TestSupport

/// One running invitations service for a test: its own database and Redis stream, an SMTP sink the
/// mail really goes to, access tokens from a test issuer, and auth's events put on the stream as
/// auth would.
struct InvitationsTestEnvironment: ServiceHarness {
    let serviceName = "invitations"
    let client: any TestClientProtocol
    let issuer: TestIssuer
    let database: TestDatabase
    let config: ServiceConfig
    let redis: RedisClient
    let mail: MailSink

    static func run(_ environment: [String: String] = [:], _ body: @Sendable (InvitationsTestEnvironment) async throws -> Void) async throws {
        let mail = try await MailSink.start()
        defer { mail.stop() }
        let settings = [
            "SMTP_URL": "smtp://127.0.0.1:\(mail.port)", "APP_NAME": "Test Gym", "APP_BASE_URL": "https://app.test", "APP_STORE_URL": "https://apps.apple.com/app/id123",
            "PUBLIC_API_URL": "https://api.test", "ACCEPT_ROLE_WAIT_MS": "3000",
        ].merging(environment) { $1 }
        try await runService("invitations", environment: settings, migrations: InvitationsService.definition.allMigrations, build: buildApplication) { service in
            try await body(
                InvitationsTestEnvironment(client: service.client, issuer: service.issuer, database: service.database, config: service.config, redis: service.redis, mail: mail))
        }
    }

    // MARK: accounts and events

    struct User: BearerHolder {
        let id: UUID
        let email: String
        let token: String
        var path: String { id.uuidString.lowercased() }
    }

    /// An account as auth makes one: `user.registered`, `user.email_verified` when `emailVerified`
    /// (vouched for by `vouchedBy`, else proven by mail), and the roles on the stream, awaited here.
    func user(
        _ name: String? = nil, email: String? = nil, roles: [Role] = [.user], emailVerified: Bool = true, provider: String = "email", vouchedBy: String? = nil
    ) async throws -> User {
        let id = UUID()
        let address = email ?? "\(TestEnvironment.uniqueName("u"))@example.com"
        try await publish(UserRegistered(userID: id, email: address, displayName: name, provider: provider), userID: id)
        if emailVerified { try await publish(UserEmailVerified(userID: id, email: address, vouchedBy: vouchedBy), userID: id) }
        if roles != [.user] { try await publish(UserRolesChanged(userID: id, roles: roles, added: roles.filter { $0 != .user }, removed: []), userID: id) }
        try await waitUntil(.seconds(15)) {
            try await count("SELECT count(*) FROM accounts WHERE user_id = '\(id)' AND roles = \(Self.sqlArray(roles)) AND email_verified = \(emailVerified)") == 1
        }
        return User(id: id, email: address, token: try await issuer.token(userID: id, roles: roles, emailVerified: emailVerified))
    }

    func coach(_ name: String = "Sam Strong") async throws -> User {
        try await user(name, roles: [.user, .coach])
    }

    static func sqlArray(_ roles: [Role]) -> String {
        "ARRAY[" + roles.map { "'\($0.rawValue)'" }.joined(separator: ",") + "]::text[]"
    }

    func publish<Payload: EventPayload>(_ payload: Payload, userID: UUID?, producer: String = "auth", occurredAt: Date = Date(), sequence: Int64? = nil) async throws {
        try await EventStream(redis: redis, name: config.events.stream).publish(payload, producer: producer, userID: userID, occurredAt: occurredAt, sequence: sequence)
    }

    /// Events the service has put on the stream, of one type, as their `data`.
    func events(_ type: String) async throws -> [[String: Any]] {
        try await EventStream(redis: redis, name: config.events.stream).envelopes(type).compactMap { $0["data"] as? [String: Any] }
    }

    /// What auth does on `invitation.accepted` for `user`: `client` granted, `user.roles_changed` sent.
    func actAsAuth(granting user: User) -> Task<Void, any Error> {
        Task {
            try await waitUntil(.seconds(15)) { try await events("invitation.accepted").contains { ($0["client_id"] as? String)?.lowercased() == user.path } }
            try await publish(UserRolesChanged(userID: user.id, roles: [.user, .client], added: [.client], removed: []), userID: user.id)
        }
    }

    // MARK: HTTP

    typealias Reply = APIReply

    /// Adds a client and returns it with the code from the mail that really arrived.
    func invite(_ name: String, email: String, by coach: User, extra: [String: Any] = [:]) async throws -> (client: Reply, code: String) {
        let before = mail.messages().filter { $0.lowercased().contains("to: \(email.lowercased())") }.count
        let created = try await call(.post, "/v1/clients", as: coach, json: ["name": name, "email": email].merging(extra) { $1 })
        try #require(created.status == .created, "invite: \(created.text)")
        return (created, try await code(mailedTo: email, count: before + 1))
    }

    /// A client as the flow makes one: invited by `coach` at an address of its own, signed up at
    /// it, and accepted.
    func acceptedClient(_ name: String, by coach: User) async throws -> (client: Reply, user: User) {
        let address = "\(TestEnvironment.uniqueName(name.lowercased()))@example.com"
        let (client, code) = try await invite(name, email: address, by: coach)
        let user = try await user(email: address)
        let accepted = try await call(.post, "/v1/invitations/\(code)/accept", as: user)
        #expect(accepted.status == .accepted, "\(accepted.text)")
        return (client, user)
    }

    /// The code in the newest invitation mail to `email`.
    func code(mailedTo email: String, count: Int = 1) async throws -> String {
        let mails = try await mails(to: email, count: count)
        return try Self.code(in: mails.last!)
    }

    func mails(to address: String, count: Int = 1) async throws -> [String] {
        let matching: @Sendable () -> [String] = { mail.messages().filter { $0.lowercased().contains("to: \(address.lowercased())") } }
        try await waitUntil(.seconds(15)) { matching().count >= count }
        return matching()
    }

    static func code(in message: String) throws -> String {
        let match = try #require(message.firstMatch(of: try Regex("https://app.test/invite\\?code=([A-Za-z0-9_-]{20,})")))
        return String(try #require(match.output[1].substring))
    }

    // MARK: database

}
