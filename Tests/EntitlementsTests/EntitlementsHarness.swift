import AppStoreServer
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
@testable import Entitlements
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
import Synchronization
import Testing
import TestSupport

/// A clock the tests move: the service decides expiry and grace periods by it.
final class TestClock: Sendable {
    private let offset = Mutex<TimeInterval>(0)
    func now() -> Date { Date() + offset.withLock { $0 } }
    func advance(_ seconds: TimeInterval) { offset.withLock { $0 += seconds } }
}

/// One running entitlements service for a test: its own database and Redis stream, access tokens
/// from a test issuer, auth's events put on the stream as auth would, a local App Store issuer whose
/// root the service trusts through `APPLE_ROOT_CERTIFICATES`, and a clock the test moves.
struct EntitlementsTestEnvironment: ServiceHarness {
    let serviceName = "entitlements"
    let client: any TestClientProtocol
    let issuer: TestIssuer
    let appStore: AppStoreIssuer
    let database: TestDatabase
    let config: ServiceConfig
    let redis: RedisClient
    let clock: TestClock
    let admin: User

    static let bundleID = "com.researchapp.app"
    static let appAppleID: Int64 = 1_234_567_890

    static func run(
        _ environment: [String: String] = [:], appStore: AppStoreIssuer? = nil, _ body: @Sendable (EntitlementsTestEnvironment) async throws -> Void
    ) async throws {
        try await run(environment, appStore: appStore, on: nil, body)
    }

    /// Another start of the service on this one's database and event stream, with `environment` in
    /// place of this one's settings (the same App Store issuer, a clock and a token issuer of its
    /// own), while this one runs on: a restart with changed settings, or a replica started beside it.
    /// Either one's relay may send the other's events: both move the one outbox to the one stream.
    func restarted(_ environment: [String: String], _ body: @Sendable (EntitlementsTestEnvironment) async throws -> Void) async throws {
        try await Self.run(environment, appStore: appStore, on: (database, config.events.stream), body)
    }

    private static func run(
        _ environment: [String: String], appStore: AppStoreIssuer?, on existing: (database: TestDatabase, stream: String)?,
        _ body: @Sendable (EntitlementsTestEnvironment) async throws -> Void
    ) async throws {
        let appStore = try appStore ?? AppStoreIssuer()
        let rootFile = FileManager.default.temporaryDirectory.appendingPathComponent("\(TestEnvironment.uniqueName("apple-root")).pem")
        try appStore.rootPEM.write(to: rootFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: rootFile) }
        let settings = [
            "APPLE_ROOT_CERTIFICATES": rootFile.path, "APPLE_BUNDLE_ID": bundleID, "APPLE_APP_APPLE_ID": String(appAppleID), "APPLE_ENVIRONMENT": "Production",
        ].merging(environment) { $1 }
        let clock = TestClock()
        let definition = EntitlementsService.configured(clock: { clock.now() })
        func build(_ config: ServiceConfig) throws -> some ApplicationProtocol { try buildServiceApplication(definition, config: config) }
        @Sendable func started(_ service: RunningService) async throws {
            let adminID = UUID()
            let admin = User(id: adminID, email: "admin@example.com", token: try await service.issuer.token(userID: adminID, roles: [.user, .admin]))
            let env = EntitlementsTestEnvironment(
                client: service.client, issuer: service.issuer, appStore: appStore, database: service.database, config: service.config, redis: service.redis,
                clock: clock, admin: admin)
            // The catalogue is announced once migrations are done: awaited, so that no test's user
            // is told of it by chance.
            try await waitUntil(.seconds(20)) { try await env.count("SELECT count(*) FROM catalog_announcements") > 0 }
            try await body(env)
        }
        if let existing {
            try await runService("entitlements", database: existing.database, stream: existing.stream, environment: settings, build: build, started)
        } else {
            try await runService("entitlements", environment: settings, migrations: EntitlementsService.definition.allMigrations, build: build, started)
        }
    }

    // MARK: accounts and events

    struct User: BearerHolder {
        let id: UUID
        let email: String
        let token: String
        var path: String { id.uuidString.lowercased() }
    }

    /// An account as auth makes one: `user.registered` (and `user.email_verified` unless told not
    /// to) on the stream, the customer row awaited. Only `user.email_verified` proves the address,
    /// whichever provider registered it.
    func user(email: String? = nil, provider: String = "email", verified: Bool = true) async throws -> User {
        let id = UUID()
        let address = email ?? "\(TestEnvironment.uniqueName("u"))@example.com"
        try await publish(UserRegistered(userID: id, email: address, displayName: nil, provider: provider), userID: id)
        if verified { try await publish(UserEmailVerified(userID: id, email: address), userID: id) }
        let proven = verified
        try await waitUntil(.seconds(15)) {
            try await count("SELECT count(*) FROM customers WHERE user_id = '\(id)' AND email_normalized IS NOT NULL AND email_verified = \(proven)") == 1
        }
        return User(id: id, email: address, token: try await issuer.token(userID: id))
    }

    /// `user`, made by another start of the service, with a token from this one's issuer.
    func signedIn(_ user: User) async throws -> User {
        User(id: user.id, email: user.email, token: try await issuer.token(userID: user.id))
    }

    func publish<Payload: EventPayload>(_ payload: Payload, userID: UUID?, producer: String = "auth") async throws {
        try await EventStream(redis: redis, name: config.events.stream).publish(payload, producer: producer, userID: userID)
    }

    /// Events the service has put on the stream, of one type, as their `data`.
    func events(_ type: String) async throws -> [[String: Any]] {
        try await EventStream(redis: redis, name: config.events.stream).envelopes(type).compactMap { $0["data"] as? [String: Any] }
    }

    /// Gives `user` a tier through the admin API.
    @discardableResult
    func grant(_ user: User, tier: String, days: Double = 30) async throws -> String {
        let reply = try await call(
            .post, "/v1/admin/entitlements/\(user.path)/grants", as: admin,
            json: ["tier": tier, "until": ISO8601DateFormatter().string(from: clock.now() + days * 86_400), "reason": "test"])
        try #require(reply.status == .created, "grant: \(reply.text)")
        return try #require(reply.json["id"] as? String)
    }

    /// Takes back every live grant of `user`.
    func revokeGrants(_ user: User) async throws {
        let ids = try await withClient(database.config(for: serviceName)) { client in
            var ids: [UUID] = []
            for try await id in try await client.query("SELECT id FROM grants WHERE user_id = \(user.id) AND revoked_at IS NULL", logger: TestEnvironment.logger)
                .decode(UUID.self)
            { ids.append(id) }
            return ids
        }
        for id in ids {
            let reply = try await call(.delete, "/v1/admin/entitlements/\(user.path)/grants/\(id.uuidString.lowercased())", as: admin)
            try #require(reply.status == .noContent, "revoke: \(reply.text)")
        }
    }

    /// A whole millisecond after `start` that PostgreSQL gives back later than a payload reads it
    /// (a `timestamptz` keeps microseconds, and a `Date` is binary): found by asking PostgreSQL.
    /// About one in a hundred does; `nil` if none of the next five thousand did.
    func millisecondReadBackLater(after start: Date) async throws -> Date? {
        try await withClient(database.config(for: serviceName)) { client in
            var milliseconds = Int64(start.timeIntervalSince1970 * 1000)
            for _ in 0..<5_000 {
                milliseconds += 1
                let sent = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
                for try await back in try await client.query("SELECT \(sent)::timestamptz", logger: TestEnvironment.logger).decode(Date.self) where back > sent {
                    return sent
                }
            }
            return nil
        }
    }

    func me(_ user: User) async throws -> [String: Any] {
        let reply = try await call(.get, "/v1/entitlements/me", as: user)
        try #require(reply.status == .ok, "me: \(reply.text)")
        return reply.json
    }

    // MARK: the App Store

    /// A subscription transaction as the App Store would sign it.
    func transaction(
        _ product: String = "com.researchapp.pro.monthly", original: String, id: String? = nil, for user: User? = nil, token: UUID? = nil, days: Double = 30,
        purchased: Date? = nil, revoked: Date? = nil, environment: AppStoreEnvironment = .production, signed: Date? = nil, bundle: String = bundleID
    ) async throws -> AppStoreTransaction {
        let now = clock.now()
        let purchase = purchased ?? now - 60
        var accountToken = token
        if accountToken == nil, let user { accountToken = UUID(uuidString: try #require(try await me(user)["app_account_token"] as? String)) }
        return AppStoreTransaction(
            transactionID: id ?? String(Int.random(in: 100_000_000...999_999_999)), originalTransactionID: original, bundleID: bundle, productID: product,
            purchaseDate: purchase, expiresDate: purchase + days * 86_400, revocationDate: revoked, revocationReason: revoked == nil ? nil : 0,
            appAccountToken: accountToken, environment: environment, signedDate: signed ?? now)
    }

    func renewal(
        _ transaction: AppStoreTransaction, renews: Bool = true, next: String? = nil, retry: Bool = false, grace: Date? = nil, signed: Date? = nil
    ) -> AppStoreRenewalInfo {
        AppStoreRenewalInfo(
            originalTransactionID: transaction.originalTransactionID, productID: transaction.productID, autoRenewProductID: next ?? transaction.productID,
            autoRenewStatus: renews ? 1 : 0, isInBillingRetryPeriod: retry, gracePeriodExpiresDate: grace, environment: transaction.environment,
            signedDate: signed ?? transaction.signedDate)
    }

    /// A signed server notification around the transaction and renewal info.
    func notification(
        _ type: String, subtype: String? = nil, transaction: AppStoreTransaction?, renewal: AppStoreRenewalInfo? = nil, signed: Date? = nil, uuid: String = UUID().uuidString,
        appAppleID: Int64? = appAppleID
    ) throws -> String {
        let environment = transaction?.environment ?? .production
        let data = AppStoreNotification.NotificationData(
            appAppleID: appAppleID, bundleID: Self.bundleID, environment: environment, signedTransactionInfo: try transaction.map { try appStore.sign($0) },
            signedRenewalInfo: try renewal.map { try appStore.sign($0) })
        return try appStore.sign(AppStoreNotification(notificationType: type, subtype: subtype, notificationUUID: uuid, signedDate: signed ?? clock.now(), data: data))
    }

    @discardableResult
    func deliver(_ signedPayload: String) async throws -> APIReply {
        try await call(.post, "/v1/webhooks/app-store", json: ["signedPayload": signedPayload])
    }

    func buy(_ transaction: AppStoreTransaction, as user: User) async throws -> APIReply {
        try await call(.post, "/v1/purchases/apple", as: user, json: ["signed_transaction": try appStore.sign(transaction)])
    }
}
