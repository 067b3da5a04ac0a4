import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import JWTKit
import Models
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

/// Tokens through the real middleware and router, with keys fetched over HTTP from a local issuer.
@Suite struct TokenTests {
    struct Me: Codable, ResponseEncodable {
        var userID: UUID
        var roles: [String]
    }

    static func app(verifier: TokenVerifier) -> some ApplicationProtocol {
        let router = Router(context: ServiceRequestContext.self)
        router.add(middleware: TelemetryMiddleware(metrics: HTTPMetrics(registry: MetricsRegistry())))
        router.add(middleware: ProblemMiddleware())
        router.add(middleware: TokenMiddleware(verifier: verifier))
        router.get("public") { _, context in context.caller == nil ? "anonymous" : "signed in" }
        let signedIn = router.group("me", context: AuthenticatedContext.self)
        signedIn.get { _, context in Me(userID: context.caller.userID, roles: context.caller.roles.map(\.rawValue).sorted()) }
        signedIn.get("admin") { _, context -> String in
            try context.require(anyOf: .admin)
            return "welcome"
        }
        return Application(router: router)
    }

    func withIssuer(_ body: @escaping @Sendable (TestIssuer, TokenVerifier, any TestClientProtocol) async throws -> Void) async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        let httpClient = HTTPClientBox.shared
        let verifier = TokenVerifier(source: HTTPJWKSSource(url: issuer.jwksURL, httpClient: httpClient), config: issuer.tokenConfig, logger: TestEnvironment.logger)
        try await Self.app(verifier: verifier).test(.router) { client in
            try await body(issuer, verifier, client)
        }
    }

    func problemCode(_ response: TestResponse) throws -> String {
        try JSONDecoder.api.decode(Problem.self, from: Data(buffer: response.body)).code
    }

    func get(_ client: any TestClientProtocol, _ path: String, token: String?) async throws -> TestResponse {
        var headers: HTTPFields = [:]
        if let token { headers[.authorization] = "Bearer \(token)" }
        return try await client.execute(uri: path, method: .get, headers: headers)
    }

    @Test func aValidTokenNamesTheCaller() async throws {
        try await withIssuer { (issuer: TestIssuer, _: TokenVerifier, client: any TestClientProtocol) async throws in
            let userID = UUID()
            let response = try await get(client, "/me", token: try await issuer.token(userID: userID, roles: [.user, .coach]))
            #expect(response.status == .ok)
            let me = try JSONDecoder.api.decode(Me.self, from: Data(buffer: response.body))
            #expect(me.userID == userID)
            #expect(me.roles == ["coach", "user"])
            #expect(try await get(client, "/public", token: nil).body == ByteBuffer(string: "anonymous"))
        }
    }

    @Test func missingTokenAndMissingRole() async throws {
        try await withIssuer { (issuer: TestIssuer, _: TokenVerifier, client: any TestClientProtocol) async throws in
            let anonymous = try await get(client, "/me", token: nil)
            #expect(anonymous.status == .unauthorized)
            #expect(try problemCode(anonymous) == "unauthorized")
            let notAdmin = try await get(client, "/me/admin", token: try await issuer.token(roles: [.user]))
            #expect(notAdmin.status == .forbidden)
            #expect(try problemCode(notAdmin) == "forbidden")
            #expect(try await get(client, "/me/admin", token: try await issuer.token(roles: [.admin])).status == .ok)
        }
    }

    @Test func expiredTokensAreRefused() async throws {
        try await withIssuer { (issuer: TestIssuer, _: TokenVerifier, client: any TestClientProtocol) async throws in
            let expired = try await issuer.token(issuedAt: Date().addingTimeInterval(-3600), expiresIn: 900)
            let response = try await get(client, "/me", token: expired)
            #expect(response.status == .unauthorized)
            #expect(try problemCode(response) == "token_expired")
            // Inside the leeway (5 s in tests) a just-expired token still passes.
            let justExpired = try await issuer.token(issuedAt: Date().addingTimeInterval(-902), expiresIn: 900)
            #expect(try await get(client, "/me", token: justExpired).status == .ok)
            // A route that needs no caller ignores the token, expired, forged or malformed, and is
            // answered as to anyone (refreshing must work with the expired token still attached).
            for token in [expired, "not-a-jwt", expired + "x"] {
                let open = try await get(client, "/public", token: token)
                #expect(open.status == .ok && open.body == ByteBuffer(string: "anonymous"), "\(token)")
            }
            var malformed: HTTPFields = [.authorization: "Basic dXNlcjpwYXNz"]
            #expect(try await client.execute(uri: "/public", method: .get, headers: malformed).status == .ok)
            malformed[.authorization] = "Basic dXNlcjpwYXNz"
            let refused = try await client.execute(uri: "/me", method: .get, headers: malformed)
            #expect(refused.status == .unauthorized)
            #expect(try problemCode(refused) == "invalid_token")
        }
    }

    /// The gateway marks a request whose token's session it heard end (`X-Session-Ended`): a route
    /// that needs a caller answers `session_revoked`, one that needs none goes on as without a
    /// token (an app may keep its last token on a sign-in). Without the mark, the token is the caller.
    @Test func aTokenMarkedAsOfAnEndedSessionIsRefusedWhereACallerIsNeeded() async throws {
        try await withIssuer { (issuer: TestIssuer, _: TokenVerifier, client: any TestClientProtocol) async throws in
            let token = try await issuer.token()
            let marked: HTTPFields = [.authorization: "Bearer \(token)", .sessionEnded: "1"]
            let refused = try await client.execute(uri: "/me", method: .get, headers: marked)
            #expect(refused.status == .unauthorized)
            #expect(try problemCode(refused) == "session_revoked")
            let open = try await client.execute(uri: "/public", method: .get, headers: marked)
            #expect(open.status == .ok && open.body == ByteBuffer(string: "anonymous"))
            #expect(try await get(client, "/me", token: token).status == .ok)
        }
    }

    /// A token verified once is answered from memory afterwards, still with its expiry checked, and
    /// a tampered copy of it is not mistaken for it.
    @Test func aVerifiedTokenIsRememberedButStillExpires() async throws {
        try await withIssuer { (issuer: TestIssuer, verifier: TokenVerifier, _: any TestClientProtocol) async throws in
            let userID = UUID()
            let token = try await issuer.token(userID: userID, roles: [.user, .creator], expiresIn: 900)
            let first = try await verifier.verify(token)
            let again = try await verifier.verify(token)
            #expect(first == again && again.userID == userID && again.has(.creator))
            await #expect(throws: TokenError.self) { try await verifier.verify(token, now: Date().addingTimeInterval(1_000)) }
            var tampered = Array(token.utf8)
            tampered[tampered.count - 3] = tampered[tampered.count - 3] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            await #expect(throws: TokenError.self) { try await verifier.verify(String(decoding: tampered, as: UTF8.self)) }
            // The same signature on other claims: remembered tokens are found by their signature's
            // bytes but must match whole.
            var parts = token.split(separator: ".").map(String.init)
            var claims = try JSONSerialization.jsonObject(with: Base64URL.decode(parts[1])!) as! [String: Any]
            claims["roles"] = ["user", "admin"]
            parts[1] = Base64URL.encode(try JSONSerialization.data(withJSONObject: claims))
            await #expect(throws: TokenError.badSignature) { try await verifier.verify(parts.joined(separator: ".")) }
            // A cached token with a letter swapped for one Unicode calls equivalent (K, the Kelvin
            // sign) is another token, refused as any malformed one: remembered tokens match byte for
            // byte. Tokens are issued until one has a K before its last 32 characters (the part the
            // cache hashes); most do, and twenty without one would be odds of about 1e-7.
            var withK: (token: String, k: String.Index)?
            for _ in 0..<20 where withK == nil {
                let candidate = try await issuer.token(userID: userID, roles: [.user, .creator], expiresIn: 900)
                if let k = candidate.dropLast(32).firstIndex(of: "K") { withK = (candidate, k) }
            }
            let (cached, k) = try #require(withK)
            _ = try await verifier.verify(cached)
            var variant = cached
            variant.replaceSubrange(k...k, with: "\u{212A}")
            #expect(variant == cached, "Swift's String equality is Unicode canonical equivalence")
            await #expect(throws: TokenError.self) { try await verifier.verify(variant) }
        }
    }

    @Test func algNoneAndHS256WithThePublicKeyAreRefused() async throws {
        try await withIssuer { (issuer: TestIssuer, _: TokenVerifier, client: any TestClientProtocol) async throws in
            let valid = try await issuer.token()
            let parts = valid.split(separator: ".").map(String.init)
            func header(_ json: String) -> String { Base64URL.encode(Data(json.utf8)) }
            let none = header(#"{"alg":"none","kid":"key-1","typ":"JWT"}"#) + "." + parts[1] + "."
            #expect(try problemCode(try await get(client, "/me", token: none)) == "invalid_token")

            // The classic confusion attack: HMAC keyed with the issuer's public key.
            let hsHeader = header(#"{"alg":"HS256","kid":"key-1","typ":"JWT"}"#)
            let publicKeyPEM = try issuer.currentKey.privateKey.publicKey.pemRepresentation
            let mac = HMAC<SHA256>.authenticationCode(for: Data((hsHeader + "." + parts[1]).utf8), using: SymmetricKey(data: Data(publicKeyPEM.utf8)))
            let hs256 = hsHeader + "." + parts[1] + "." + Base64URL.encode(Data(mac))
            let response = try await get(client, "/me", token: hs256)
            #expect(response.status == .unauthorized)
            #expect(try problemCode(response) == "invalid_token")
        }
    }

    @Test func wrongIssuerOrAudienceIsRefused() async throws {
        try await withIssuer { (issuer: TestIssuer, _: TokenVerifier, client: any TestClientProtocol) async throws in
            #expect(try await get(client, "/me", token: try await issuer.token(issuer: "https://evil.test")).status == .unauthorized)
            #expect(try await get(client, "/me", token: try await issuer.token(audience: "another-app")).status == .unauthorized)
        }
    }

    @Test func anUnknownKidTriggersOneRefresh() async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        var config = issuer.tokenConfig
        // Long enough that the ten checks below, on a loaded machine, all fall within one interval.
        config.minRefreshInterval = .seconds(3)
        let verifier = TokenVerifier(source: HTTPJWKSSource(url: issuer.jwksURL, httpClient: HTTPClientBox.shared), config: config, logger: TestEnvironment.logger)
        _ = try await verifier.verify(try await issuer.token())
        #expect(issuer.fetches == 1)
        try await Task.sleep(for: .milliseconds(3_100))
        // Tokens from a key the issuer never published, arriving together: one refresh between them,
        // all refused, and no more fetches within the minimum interval.
        let stranger = TestIssuer.Key(kid: "stranger")
        let token = try await issuer.token(key: stranger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<10 {
                group.addTask {
                    await #expect(throws: TokenError.unknownKey("stranger")) { try await verifier.verify(token) }
                }
            }
            try await group.waitForAll()
        }
        #expect(issuer.fetches == 2)
        // A forged token that reuses a published kid is a bad signature, not a refresh.
        let forged = try await issuer.token(key: TestIssuer.Key(kid: "key-1"))
        await #expect(throws: TokenError.badSignature) { try await verifier.verify(forged) }
        #expect(issuer.fetches == 2)
    }

    /// An issuer that did not answer is asked again a second later, not after the whole refresh
    /// interval: every token was refused until then.
    @Test func anIssuerThatDidNotAnswerIsAskedAgainASecondLater() async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        var config = issuer.tokenConfig
        config.minRefreshInterval = .seconds(60)
        let source = KeysUnavailableAtFirst(failures: 1, then: HTTPJWKSSource(url: issuer.jwksURL, httpClient: HTTPClientBox.shared))
        let verifier = TokenVerifier(source: source, config: config, logger: TestEnvironment.logger)
        let token = try await issuer.token()
        await #expect(throws: TokenError.self) { try await verifier.verify(token) }
        // Within the second: refused at once, without asking.
        await #expect(throws: TokenError.self) { try await verifier.verify(token) }
        #expect(source.calls == 1)
        try await Task.sleep(for: JWKSCache.retryAfterFailure + .milliseconds(100))
        _ = try await verifier.verify(token)
        #expect(source.calls == 2 && issuer.fetches == 1)
    }

    /// A fetch shared by two requests goes with the one that started it when that one is
    /// cancelled; the other, still waiting for the keys, fetches them itself instead of being
    /// told its token's key is unknown.
    @Test func aWaiterFetchesAgainWhenTheSharedFetchIsCancelled() async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        let source = FirstFetchHangs(then: HTTPJWKSSource(url: issuer.jwksURL, httpClient: HTTPClientBox.shared))
        let verifier = TokenVerifier(source: source, config: issuer.tokenConfig, logger: TestEnvironment.logger)
        let token = try await issuer.token()
        let first = Task { try await verifier.verify(token) }
        try await waitUntil(.seconds(10)) { source.calls == 1 }
        let second = Task { try await verifier.verify(token) }
        // The second is waiting on the first's fetch (it has not asked the source itself).
        try await Task.sleep(for: .milliseconds(200))
        #expect(source.calls == 1)
        first.cancel()
        await #expect(throws: TokenError.self) { try await first.value }
        _ = try await second.value
        #expect(source.calls == 2 && issuer.fetches == 1)
    }

    @Test func aRotatedKeyIsPickedUpByRefreshing() async throws {
        let issuer = TestIssuer()
        try await issuer.start()
        defer { issuer.stop() }
        var config = issuer.tokenConfig
        config.minRefreshInterval = .zero
        let verifier = TokenVerifier(source: HTTPJWKSSource(url: issuer.jwksURL, httpClient: HTTPClientBox.shared), config: config, logger: TestEnvironment.logger)
        _ = try await verifier.verify(try await issuer.token())
        #expect(issuer.fetches == 1)
        let rotated = issuer.rotate(kid: "key-2")
        let caller = try await verifier.verify(try await issuer.token(key: rotated))
        #expect(caller.roles == [.user])
        #expect(issuer.fetches == 2)
        _ = try await verifier.verify(try await issuer.token(key: rotated))
        #expect(issuer.fetches == 2)  // cached now
    }

    @Test func tamperedPayloadAndMalformedHeaderAreRefused() async throws {
        try await withIssuer { (issuer: TestIssuer, _: TokenVerifier, client: any TestClientProtocol) async throws in
            let valid = try await issuer.token(roles: [.user])
            var parts = valid.split(separator: ".").map(String.init)
            var claims = try JSONSerialization.jsonObject(with: Base64URL.decode(parts[1])!) as! [String: Any]
            claims["roles"] = ["admin"]
            parts[1] = Base64URL.encode(try JSONSerialization.data(withJSONObject: claims))
            let tampered = parts.joined(separator: ".")
            let response = try await get(client, "/me/admin", token: tampered)
            #expect(response.status == .unauthorized)
            #expect(try problemCode(response) == "invalid_token")

            for garbage in ["not-a-token", "a.b.c", "%%%.e30.sig", Base64URL.encode(Data("[1,2]".utf8)) + ".e30.c2ln"] {
                let refused = try await get(client, "/me", token: garbage)
                #expect(refused.status == .unauthorized, "\(garbage)")
                #expect(try problemCode(refused) == "invalid_token")
            }
            let wrongScheme = try await client.execute(uri: "/me", method: .get, headers: [.authorization: "Basic dXNlcjpwYXNz"])
            #expect(wrongScheme.status == .unauthorized)
        }
    }
}

@Suite struct Base64URLTests {
    @Test func roundTripsAndMatchesFoundationsBase64() {
        var generator = SeededRandom("roundTripsAndMatchesFoundationsBase64")
        for length in 0..<70 {
            let data = Data((0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) })
            let expected = data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Base64URL.encode(data) == expected)
            #expect(Base64URL.decode(expected) == data)
            #expect(Base64URL.decode(data.base64EncodedString()) == data)  // padded, plain alphabet
        }
        #expect(Base64URL.decode("a") == nil)  // a lone 6-bit group is not a byte
        #expect(Base64URL.decode("ab$c") == nil)
        #expect(Base64URL.decode("") == Data())
    }

    /// One value, one accepted spelling: padding, the plain alphabet and set bits after the last
    /// byte all decode, and none is canonical.
    @Test func onlyTheUnpaddedURLSpellingIsCanonical() {
        #expect(Base64URL.isCanonical("YQ") && Base64URL.isCanonical("-_8") && Base64URL.isCanonical(""))
        for respelt in ["YQ==", "YQ=", "YR", "+/8", "-_9", "YQ ", " YQ", "Y Q"] {
            #expect(!Base64URL.isCanonical(respelt), "\(respelt)")
        }
        #expect(Base64URL.decode("YR") == Data("a".utf8) && Base64URL.decode("+/8") == Base64URL.decode("-_8"))
        #expect(Base64URL.decode("YQ==YQ") == nil && Base64URL.decode("Y\nQ") == nil)
    }
}

/// A JWKS source whose first `failures` fetches fail as an unreachable issuer's do, then asks `source`.
final class KeysUnavailableAtFirst: JWKSSource {
    private let state: Mutex<(failuresLeft: Int, calls: Int)>
    private let source: any JWKSSource

    init(failures: Int, then source: any JWKSSource) {
        state = Mutex((failures, 0))
        self.source = source
    }

    var calls: Int { state.withLock { $0.calls } }

    func fetch() async throws -> JWKS {
        let fail = state.withLock { state -> Bool in
            state.calls += 1
            guard state.failuresLeft > 0 else { return false }
            state.failuresLeft -= 1
            return true
        }
        if fail { throw TokenError.keysUnavailable("connection refused (scripted)") }
        return try await source.fetch()
    }
}

/// A JWKS source whose first fetch never ends unless its task is cancelled; later ones ask `source`.
final class FirstFetchHangs: JWKSSource {
    private let state = Mutex(0)
    private let source: any JWKSSource

    init(then source: any JWKSSource) { self.source = source }

    var calls: Int { state.withLock { $0 } }

    func fetch() async throws -> JWKS {
        let call = state.withLock { calls -> Int in
            calls += 1
            return calls
        }
        if call == 1 {
            try await Task.sleep(for: .seconds(3600))
        }
        return try await source.fetch()
    }
}
