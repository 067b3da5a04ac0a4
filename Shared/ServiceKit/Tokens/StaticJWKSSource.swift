import JWTKit

/// Keys known in advance: the issuer checking its own tokens, or a test.
public struct StaticJWKSSource: JWKSSource {
    public let jwks: JWKS
    public init(jwks: JWKS) { self.jwks = jwks }
    public func fetch() async throws -> JWKS { jwks }
}
