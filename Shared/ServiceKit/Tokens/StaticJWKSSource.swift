import JWTKit

/// Keys known in advance: the issuer checking its own tokens, or a test.
package struct StaticJWKSSource: JWKSSource {
    package let jwks: JWKS
    package init(jwks: JWKS) { self.jwks = jwks }
    package func fetch() async throws -> JWKS { jwks }
}
