@testable import Auth
import Crypto
import CryptoExtras
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JWTKit
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

/// A stand-in for Apple's or Google's sign-in: its own RSA keys, its JWKS served over HTTP on
/// loopback, ID tokens signed with RS256 as the real providers do. The service is pointed at it by
/// configuration only.
final class ProviderIssuer: Sendable {
    let issuer: String
    let clientID: String
    let kid: String
    private let privateKey: _RSA.Signing.PrivateKey
    private let jwks: String
    private let server = LocalServer()

    init(issuer: String, clientID: String, kid: String = "provider-key-1") throws {
        self.issuer = issuer
        self.clientID = clientID
        self.kid = kid
        let backing = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        privateKey = backing
        let primitives = try Insecure.RSA.PublicKey(backing: backing.publicKey).getKeyPrimitives()
        let key: [String: String] = [
            "kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
            "n": Base64URL.encode(primitives.modulus), "e": Base64URL.encode(primitives.publicExponent),
        ]
        jwks = String(decoding: try JSONSerialization.data(withJSONObject: ["keys": [key]]), as: UTF8.self)
    }

    var jwksURL: String { server.baseURL + "/keys" }

    func start() async throws {
        let router = Router()
        let body = jwks
        router.get("keys") { _, _ in Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body))) }
        try await server.start(router, label: "provider")
    }

    func stop() { server.stop() }

    /// An ID token; every claim can be overridden or removed (`nil` value) to make a bad one.
    func idToken(
        subject: String, email: String?, emailVerified: Any = true, nonce: String? = nil, audience: String? = nil, issuer: String? = nil,
        expiresIn: TimeInterval = 600, extra: [String: Any] = [:], signWith other: _RSA.Signing.PrivateKey? = nil, kid: String? = nil
    ) throws -> String {
        var claims: [String: Any] = [
            "iss": issuer ?? self.issuer, "sub": subject, "aud": audience ?? clientID,
            "iat": Int(Date().timeIntervalSince1970), "exp": Int(Date().addingTimeInterval(expiresIn).timeIntervalSince1970),
            "email_verified": emailVerified,
        ]
        if let email { claims["email"] = email }
        if let nonce { claims["nonce"] = nonce }
        for (key, value) in extra { claims[key] = value }
        let header = ["alg": "RS256", "kid": kid ?? self.kid, "typ": "JWT"]
        let signingInput = Base64URL.encode(try JSONSerialization.data(withJSONObject: header)) + "." + Base64URL.encode(try JSONSerialization.data(withJSONObject: claims))
        // RS256 is RSASSA-PKCS1-v1_5 with SHA-256 (RFC 7518 §3.3).
        let signature = try (other ?? privateKey).signature(for: SHA256.hash(data: Data(signingInput.utf8)), padding: .insecurePKCS1v1_5)
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }

    static func otherKey() throws -> _RSA.Signing.PrivateKey {
        try _RSA.Signing.PrivateKey(keySize: .bits2048)
    }
}

/// One running auth service for a test: its own database, Redis stream, SMTP sink and provider
/// issuers, reached over real HTTP.
struct AuthTestEnvironment: Sendable {
    let client: any TestClientProtocol
    let mail: MailSink
    let apple: ProviderIssuer
    let google: ProviderIssuer
    let database: TestDatabase
    let config: ServiceConfig
    /// The client address this environment's requests come from unless a test names another
    /// (`X-Forwarded-For`, as the gateway writes it). Failed sign-ins are counted per address in
    /// the Redis every test shares, for a quarter of an hour: from one shared loopback address, the
    /// wrong passwords of tests running side by side would add up to the address's limit and lock
    /// out another test's right one.
    let clientAddress = Self.nextClientAddress()
    /// The service's signing key, so that a test can make tokens the service would (expired ones, say).
    let signingKey: TestIssuer.Key

    static let appleClientID = "com.example.foodapp"
    static let googleClientID = "1234-test.apps.googleusercontent.com"

    /// `redis`: a Redis of the test's own (one it may stop); the shared test Redis otherwise.
    static func run(_ environment: [String: String] = [:], redis: RedisConfiguration? = nil, _ body: @Sendable (AuthTestEnvironment) async throws -> Void) async throws {
        let database = try await TestDatabase.migrated(service: "auth", migrations: AuthService.definition.allMigrations)
        try await database.dropping { try await run(environment, redis: redis, database: database, body) }
    }

    private static func run(
        _ environment: [String: String], redis: RedisConfiguration?, database: TestDatabase, _ body: @Sendable (AuthTestEnvironment) async throws -> Void
    ) async throws {
        let mail = try await MailSink.start()
        defer { mail.stop() }
        let apple = try ProviderIssuer(issuer: "https://appleid.apple.com", clientID: appleClientID)
        let google = try ProviderIssuer(issuer: "https://accounts.google.com", clientID: googleClientID)
        try await apple.start()
        try await google.start()
        defer { apple.stop(); google.stop() }
        let key = P256.Signing.PrivateKey()
        let settings: [String: String] = [
            "JWT_SIGNING_KEY": key.pemRepresentation,
            "JWT_SIGNING_KEY_ID": "test-key-1",
            "BCRYPT_COST": "4",
            // The tests sign up many accounts from one address; the limit has a test of its own.
            "SIGNUP_MAX_PER_IP_PER_HOUR": "1000000",
            "SMTP_URL": "smtp://127.0.0.1:\(mail.port)",
            "APP_NAME": "Test Kitchen",
            "APP_BASE_URL": "https://app.test",
            "APPLE_CLIENT_IDS": appleClientID, "APPLE_JWKS_URL": apple.jwksURL, "APPLE_ISSUER": apple.issuer,
            "GOOGLE_CLIENT_IDS": googleClientID, "GOOGLE_JWKS_URL": google.jwksURL, "GOOGLE_ISSUER": "https://accounts.google.com,accounts.google.com",
        ].merging(environment) { $1 }
        let config = ServiceConfig.test(name: "auth", database: database, redis: try redis ?? TestEnvironment.redis(), stream: TestEnvironment.uniqueName("events"), environment: settings)
        let app = try buildApplication(config)
        try await app.test(.live) { client in
            try await waitUntil(.seconds(20)) { try await client.execute(uri: "/healthz", method: .get).status == .ok }
            let signingKey = TestIssuer.Key(
                kid: config.environment["JWT_SIGNING_KEY_ID"]!,
                privateKey: try ES256PrivateKey(pem: (try? String(contentsOfFile: config.environment["JWT_SIGNING_KEY"]!, encoding: .utf8)) ?? config.environment["JWT_SIGNING_KEY"]!))
            try await body(AuthTestEnvironment(client: client, mail: mail, apple: apple, google: google, database: database, config: config, signingKey: signingKey))
        }
    }

    static let forwardedFor = HTTPField.Name("X-Forwarded-For")!

    /// Addresses in 198.18.0.0/15 (RFC 2544's benchmarking range, which no test names on its
    /// own): one after another within a run, from a random start so that a run soon after another
    /// against the same Redis does not meet its counts.
    private static let addresses = Mutex(Int.random(in: 0..<(1 << 17)))
    static func nextClientAddress() -> String {
        let n = addresses.withLock { n in
            defer { n = (n + 1) % (1 << 17) }
            return n
        }
        return "198.\(18 + (n >> 16)).\((n >> 8) & 255).\(n & 255)"
    }

    /// A token signed with the service's own key; claims can be made bad on purpose.
    func token(for userID: String, sessionID: String? = nil, roles: [Role] = [.user], expiresIn: TimeInterval = 900, issuedAt: Date = Date()) async throws -> String {
        try await TestIssuer(issuer: config.tokens.issuer, audience: config.tokens.audience).token(
            userID: UUID(uuidString: userID)!, sessionID: sessionID.flatMap(UUID.init(uuidString:)), roles: roles, issuedAt: issuedAt, expiresIn: expiresIn, key: signingKey)
    }

    // MARK: HTTP

    typealias Reply = APIReply

    @discardableResult
    func call(_ method: HTTPRequest.Method, _ path: String, json: Any? = nil, raw: String? = nil, token: String? = nil, headers extra: HTTPFields = [:]) async throws -> Reply {
        var headers = extra
        if headers[Self.forwardedFor] == nil { headers[Self.forwardedFor] = clientAddress }
        if let token { headers[.authorization] = "Bearer \(token)" }
        var body: ByteBuffer?
        if let json {
            body = ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json))
            headers[.contentType] = "application/json"
        } else if let raw {
            body = ByteBuffer(string: raw)
            if headers[.contentType] == nil { headers[.contentType] = "application/json" }
        }
        let response = try await client.execute(uri: path, method: method, headers: headers, body: body)
        return Reply(status: response.status, headers: response.headers, body: response.body)
    }

    struct Account: Sendable {
        var id: String
        var email: String
        var password: String
        var accessToken: String
        var refreshToken: String
        var sessionID: String
    }

    /// Signs up and returns the account with its first session.
    func signUp(_ email: String = "\(TestEnvironment.uniqueName("cook"))@example.com", password: String = "correct horse battery", name: String? = nil) async throws -> Account {
        var body: [String: Any] = ["email": email, "password": password]
        if let name { body["display_name"] = name }
        let reply = try await call(.post, "/v1/auth/signup", json: body)
        try #require(reply.status == .created, "signup: \(reply.text)")
        return try Self.account(reply, email: email, password: password)
    }

    func logIn(_ email: String, _ password: String, headers: HTTPFields = [:]) async throws -> Reply {
        try await call(.post, "/v1/auth/login", json: ["email": email, "password": password], headers: headers)
    }

    static func account(_ reply: Reply, email: String, password: String) throws -> Account {
        let user = try #require(reply.json["user"] as? [String: Any])
        let session = try #require(reply.json["session"] as? [String: Any])
        // Ids as the body writes them: the tokens must carry the same text.
        return Account(
            id: try #require(user["id"] as? String), email: email, password: password,
            accessToken: try #require(session["access_token"] as? String), refreshToken: try #require(session["refresh_token"] as? String),
            sessionID: try #require(session["session_id"] as? String))
    }

    // MARK: provider sign-in

    enum Provider: String { case apple, google }

    /// A nonce from the service, as an app asks for one before each provider sign-in.
    func nonce() async throws -> String {
        let reply = try await call(.post, "/v1/auth/nonce")
        try #require(reply.status == .ok, "nonce: \(reply.text)")
        return try #require(reply.json["nonce"] as? String)
    }

    /// The ID token a provider gives the app for `nonce`: Apple carries its SHA-256 in hex, Google the
    /// nonce itself.
    func idToken(_ provider: Provider, nonce: String, subject: String, email: String?, emailVerified: Any = true, extra: [String: Any] = [:]) throws -> String {
        switch provider {
        case .apple: try apple.idToken(subject: subject, email: email, emailVerified: emailVerified, nonce: Self.sha256Hex(nonce), extra: extra)
        case .google: try google.idToken(subject: subject, email: email, emailVerified: emailVerified, nonce: nonce, extra: extra)
        }
    }

    /// A provider sign-in as an app makes it: a fresh nonce from the service, in the token and beside it.
    func signIn(with provider: Provider, subject: String, email: String?, emailVerified: Any = true, extra: [String: Any] = [:], name: Any? = nil) async throws -> Reply {
        let nonce = try await nonce()
        var body: [String: Any] = ["id_token": try idToken(provider, nonce: nonce, subject: subject, email: email, emailVerified: emailVerified, extra: extra), "nonce": nonce]
        if let name { body["name"] = name }
        return try await call(.post, "/v1/auth/\(provider.rawValue)", json: body)
    }

    static func sha256Hex(_ text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    // MARK: mail and database

    /// The mails to `address`, once `count` of them have arrived.
    func mails(to address: String, count: Int = 1) async throws -> [String] {
        let matching: @Sendable () -> [String] = { mail.messages().filter { $0.lowercased().contains("to: \(address.lowercased())") } }
        try await waitUntil(.seconds(15)) { matching().count >= count }
        return matching()
    }

    /// The token in the link of a mail (`…?token=XYZ`), as the app would take it from the link.
    static func linkToken(in message: String) throws -> String {
        let unfolded = message.replacingOccurrences(of: "=\r\n", with: "").replacingOccurrences(of: "=\n", with: "")
        let pattern = try Regex("token=([A-Za-z0-9_-]{20,})")
        let match = try #require(unfolded.firstMatch(of: pattern))
        let token = try #require(match.output[1].substring)
        return String(token)
    }

    @discardableResult
    func query<T: Sendable>(_ body: @escaping @Sendable (PostgresClient) async throws -> T) async throws -> T {
        try await withClient(database.config(for: "auth"), body)
    }

    /// The first column of the first row of `sql`, an integer (a `count(*)`).
    func count(_ sql: String) async throws -> Int {
        try await query { client in
            var result = 0
            for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).decode(Int64.self) { result = Int(value) }
            return result
        }
    }

    func execute(_ sql: String) async throws {
        try await query { client in _ = try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).collect() }
    }

    /// What `request` answers when it runs while a transaction that ran `statements` (a reset, a
    /// takeover: the account's row locked, then changed) is open: the request waits for it (this
    /// waits until something in the database waits for a lock), and then meets what it committed.
    func whileHeld(_ statements: [String], _ request: @escaping @Sendable () async throws -> Reply) async throws -> Reply {
        let logger = TestEnvironment.logger
        return try await query { client in
            try await client.withConnection { connection in
                _ = try await connection.query("BEGIN", logger: logger)
                for sql in statements { _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger).collect() }
                let attempt = Task { try await request() }
                try await waitUntil(.seconds(15)) {
                    try await query { other -> Bool in
                        let rows = try await other.query(
                            "SELECT count(*)::int FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'", logger: logger)
                        for try await count in rows.decode(Int.self) { return count > 0 }
                        return false
                    }
                }
                _ = try await connection.query("COMMIT", logger: logger)
                return try await attempt.value
            }
        }
    }

    /// What a password reset by mail does to the account, for `whileHeld`: the row locked, a new
    /// password, every session ended.
    static func reset(of user: String) -> [String] {
        [
            "SELECT 1 FROM users WHERE id = '\(user)' FOR UPDATE", "UPDATE users SET password_hash = 'replaced by the reset' WHERE id = '\(user)'",
            "DELETE FROM sessions WHERE user_id = '\(user)'",
        ]
    }

    /// How many sessions the account has.
    func sessionCount(of user: String) async throws -> Int {
        try await query { client -> Int in
            let rows = try await client.query(PostgresQuery(unsafeSQL: "SELECT count(*)::int FROM sessions WHERE user_id = '\(user)'"), logger: TestEnvironment.logger)
            for try await count in rows.decode(Int.self) { return count }
            return -1
        }
    }

    /// Event types in the outbox or already relayed to the stream, for `userID`.
    func eventTypes(for userID: String) async throws -> [String] {
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        defer { Task { await redis.close() } }
        let entries = try await redis.xrange(config.events.stream, count: 10_000)
        return entries.compactMap { entry -> String? in
            guard let json = entry.fields["envelope"], json.lowercased().contains(userID.lowercased()) else { return nil }
            return entry.fields["type"]
        }
    }
}

extension AuthTestEnvironment {
    /// The `user.sessions_ended` events on `userID`'s live stream, oldest first: which sessions each
    /// ended, and whether it ended all of them. A copy the relay sent twice (a retried batch) counts once.
    func sessionsEnded(for userID: String) async throws -> [(sessions: Set<String>, all: Bool)] {
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        defer { Task { await redis.close() } }
        let backlog = try await LiveStream.read(for: try #require(UUID(uuidString: userID)), after: nil, matching: [SessionsEnded.eventType], redis: redis)
        var seen: Set<UUID> = []
        return try backlog.matching.compactMap { entry in
            let envelope = try EventEnvelope(json: entry.envelope)
            guard seen.insert(envelope.id).inserted else { return nil }
            let ended = try envelope.decode(SessionsEnded.self)
            return (Set(ended.sessionIDs.map { $0.uuidString.lowercased() }), ended.all)
        }
    }
}

extension HTTPFields {
    /// The address the gateway would put in `X-Forwarded-For` (tests reach the service from loopback).
    static func from(_ ip: String) -> HTTPFields { [AuthTestEnvironment.forwardedFor: ip] }
}
