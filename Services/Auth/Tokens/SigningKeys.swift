import Crypto
import Foundation
import JWTKit
import ServiceKit
import Synchronization

/// The ES256 keys auth signs access tokens with: the current key (private) and, while keys rotate,
/// the previous one (public is enough). Both are published in the JWKS, so tokens signed with the
/// previous key keep verifying until they expire.
struct SigningKeys: Sendable {
    struct Key: Sendable {
        var kid: String
        var publicKey: P256.Signing.PublicKey
    }

    var kid: String
    var privateKey: P256.Signing.PrivateKey
    var previous: Key?

    init(privateKey: P256.Signing.PrivateKey, kid: String? = nil, previous: Key? = nil) {
        self.privateKey = privateKey
        self.kid = kid ?? Self.thumbprint(privateKey.publicKey)
        self.previous = previous
    }

    /// `JWT_SIGNING_KEY`: a PEM EC P-256 private key, or the path of a file holding one. Without it
    /// (not allowed in production) the process makes a key of its own, which dies with it.
    /// `JWT_SIGNING_KEY_ID` (default: the RFC 7638 thumbprint). `JWT_PREVIOUS_SIGNING_KEY` (private
    /// or public PEM, or a path) and `JWT_PREVIOUS_SIGNING_KEY_ID` for rotation.
    init(reading env: inout EnvironmentReader) {
        let current = env.string("JWT_SIGNING_KEY", default: "", requiredInProduction: true)
        var privateKey = P256.Signing.PrivateKey()
        if !current.isEmpty {
            do {
                privateKey = try P256.Signing.PrivateKey(pemRepresentation: try Self.pem(current))
            } catch {
                env.report("JWT_SIGNING_KEY is not a PEM EC P-256 private key (or a readable file holding one): \(error)")
            }
        }
        var previous: Key?
        if let text = env.optionalString("JWT_PREVIOUS_SIGNING_KEY"), !text.isEmpty {
            do {
                let pem = try Self.pem(text)
                let publicKey = try (try? P256.Signing.PrivateKey(pemRepresentation: pem).publicKey) ?? P256.Signing.PublicKey(pemRepresentation: pem)
                previous = Key(kid: env.optionalString("JWT_PREVIOUS_SIGNING_KEY_ID") ?? Self.thumbprint(publicKey), publicKey: publicKey)
            } catch {
                env.report("JWT_PREVIOUS_SIGNING_KEY is not a PEM EC P-256 key (or a readable file holding one): \(error)")
            }
        }
        self.init(privateKey: privateKey, kid: env.optionalString("JWT_SIGNING_KEY_ID"), previous: previous)
        if previous?.kid == kid { env.report("JWT_PREVIOUS_SIGNING_KEY_ID must differ from the current key's id \(kid)") }
    }

    private static func pem(_ value: String) throws -> String {
        if value.contains("-----BEGIN") { return value.replacingOccurrences(of: "\\n", with: "\n") }
        return try String(contentsOfFile: value, encoding: .utf8)
    }

    /// RFC 7638: SHA-256 over the required members in lexicographic order.
    static func thumbprint(_ key: P256.Signing.PublicKey) -> String {
        let (x, y) = coordinates(key)
        let canonical = #"{"crv":"P-256","kty":"EC","x":"\#(x)","y":"\#(y)"}"#
        return Base64URL.encode(Data(SHA256.hash(data: Data(canonical.utf8))))
    }

    static func coordinates(_ key: P256.Signing.PublicKey) -> (x: String, y: String) {
        let raw = key.rawRepresentation  // X || Y, 32 bytes each
        return (Base64URL.encode(raw.prefix(32)), Base64URL.encode(raw.suffix(32)))
    }

    /// The public keys, for the service checking its own tokens without a round trip.
    var jwks: JWKS {
        get throws { try JSONDecoder().decode(JWKS.self, from: jwksJSON) }
    }

    /// The service's own keys as a key source for its token checks, read when first needed.
    struct Source: JWKSSource {
        let keys: SigningKeys
        func fetch() async throws -> JWKS { try keys.jwks }
    }

    /// The JWKS as served at `/.well-known/jwks.json`: current key first. (Encoded with a Codable
    /// type: `JSONSerialization` with sorted keys would load ICU's locale data, a MiB of an idle process.)
    var jwksJSON: Data {
        get throws {
            struct Document: Encodable {
                struct Key: Encodable { var kty = "EC", crv = "P-256", alg = "ES256", use = "sig", kid: String, x: String, y: String }
                var keys: [Key]
            }
            var keys = [Key(kid: kid, publicKey: privateKey.publicKey)]
            if let previous { keys.append(previous) }
            return try JSONEncoder().encode(
                Document(
                    keys: keys.map { key in
                        let (x, y) = Self.coordinates(key.publicKey)
                        return Document.Key(kid: key.kid, x: x, y: y)
                    }))
        }
    }
}

/// Signs access tokens with the current key.
final class AccessTokenSigner: Sendable {
    let keys: SigningKeys
    let issuer: String
    let audience: String
    let ttlSeconds: Int
    private let collection = JWTKeyCollection()
    /// The key joins jwt-kit's collection on the first signature, not at start (an idle replica
    /// need not load the signing code).
    private let added = Mutex(false)

    init(keys: SigningKeys, issuer: String, audience: String, ttl: Duration) throws {
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        ttlSeconds = Int(ttl.components.seconds)
    }

    func sign(userID: UUID, sessionID: UUID, roles: [Role], emailVerified: Bool, now: Date = Date()) async throws -> String {
        if !added.withLock({ $0 }) {
            let key = try ES256PrivateKey(backing: keys.privateKey)
            await collection.add(ecdsa: key, kid: JWKIdentifier(string: keys.kid))  // adding twice is harmless
            added.withLock { $0 = true }
        }
        let claims = AccessTokenClaims(
            userID: userID, sessionID: sessionID, roles: roles, emailVerified: emailVerified,
            issuer: issuer, audience: audience, issuedAt: now, expiresAt: now.addingTimeInterval(TimeInterval(ttlSeconds))
        )
        return try await collection.sign(claims, kid: JWKIdentifier(string: keys.kid))
    }
}
