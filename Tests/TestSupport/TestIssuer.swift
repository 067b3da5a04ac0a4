import Foundation
import Hummingbird
import JWTKit
import Logging
import Models
import NIOCore
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Synchronization

/// A token issuer of the tests' own: ES256 keys, a JWKS served over HTTP on loopback, and signing.
/// Services under test are pointed at its JWKS URL by configuration, so the production verification
/// code is what is tested.
public final class TestIssuer: Sendable {
    public struct Key: Sendable {
        public let kid: String
        public let privateKey: ES256PrivateKey
        public init(kid: String, privateKey: ES256PrivateKey = ES256PrivateKey()) {
            self.kid = kid
            self.privateKey = privateKey
        }
    }

    public let issuer: String
    public let audience: String
    private let state: Mutex<(published: [Key], fetches: Int)>
    private let server = LocalServer()

    public init(issuer: String = "https://issuer.test", audience: String = "foodbackend") {
        self.issuer = issuer
        self.audience = audience
        state = Mutex(([Key(kid: "key-1", privateKey: ES256PrivateKey())], 0))
    }

    public var currentKey: Key { state.withLock { $0.published.last! } }
    public var fetches: Int { state.withLock { $0.fetches } }
    public var jwksURL: String { server.baseURL + "/.well-known/jwks.json" }

    /// Publishes a new key next to the old ones and signs with it from now on.
    @discardableResult
    public func rotate(kid: String) -> Key {
        let key = Key(kid: kid, privateKey: ES256PrivateKey())
        state.withLock { $0.published.append(key) }
        return key
    }

    /// The JWKS document as an issuer publishes it.
    public func jwksJSON() throws -> String {
        let keys = state.withLock { $0.published }
        let entries = try keys.map { key -> [String: String] in
            guard let parameters = key.privateKey.publicKey.parameters else { throw JWTError.invalidJWK(reason: "no parameters") }
            return ["kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": key.kid, "x": parameters.x, "y": parameters.y]
        }
        return String(decoding: try JSONSerialization.data(withJSONObject: ["keys": entries]), as: UTF8.self)
    }

    /// Starts serving the JWKS on an ephemeral loopback port.
    public func start() async throws {
        let router = Router()
        router.get(".well-known/jwks.json") { _, _ -> Response in
            self.state.withLock { $0.fetches += 1 }
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: try self.jwksJSON())))
        }
        try await server.start(router, label: "test-issuer")
    }

    public func stop() {
        server.stop()
    }

    /// Signs an access token; every claim can be overridden to make a bad one.
    public func token(
        userID: UUID = UUID(), sessionID: UUID? = UUID(), roles: [Role] = [.user], emailVerified: Bool = true,
        issuer: String? = nil, audience: String? = nil, issuedAt: Date = Date(), expiresIn: TimeInterval = 900,
        key: Key? = nil
    ) async throws -> String {
        let key = key ?? currentKey
        let claims = AccessTokenClaims(
            userID: userID, sessionID: sessionID, roles: roles, emailVerified: emailVerified,
            issuer: issuer ?? self.issuer, audience: audience ?? self.audience, issuedAt: issuedAt, expiresAt: issuedAt.addingTimeInterval(expiresIn)
        )
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: key.privateKey, kid: JWKIdentifier(string: key.kid))
        return try await keys.sign(claims, kid: JWKIdentifier(string: key.kid))
    }

    /// The token verifier configuration that trusts this issuer.
    public var tokenConfig: TokenConfig {
        TokenConfig(jwksURL: jwksURL, issuer: issuer, audience: audience, leeway: .seconds(5), minRefreshInterval: .seconds(5))
    }
}
