import JWTKit

/// Where the public keys of the token issuer come from.
public protocol JWKSSource: Sendable {
    func fetch() async throws -> JWKS
}
