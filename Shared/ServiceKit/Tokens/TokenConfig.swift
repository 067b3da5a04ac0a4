import Foundation
import ServiceKitCore

/// How incoming access tokens are checked.
public struct TokenConfig: Sendable {
    public var jwksURL: String
    public var issuer: String
    public var audience: String
    package var leeway: Duration
    /// Unknown `kid`s trigger a JWKS refresh at most this often.
    package var minRefreshInterval: Duration

    public init(jwksURL: String, issuer: String, audience: String, leeway: Duration = .seconds(30), minRefreshInterval: Duration = .seconds(5)) {
        self.jwksURL = jwksURL
        self.issuer = issuer
        self.audience = audience
        self.leeway = leeway
        self.minRefreshInterval = minRefreshInterval
    }

    public init(reading env: inout EnvironmentReader) {
        let jwks = env.url("JWKS_URL", default: "http://127.0.0.1:8081/.well-known/jwks.json", schemes: ["http", "https"], requiredInProduction: true)
        self.init(
            jwksURL: env.values["JWKS_URL"].flatMap { jwks == nil ? nil : $0 } ?? "http://127.0.0.1:8081/.well-known/jwks.json",
            issuer: env.string("JWT_ISSUER", default: "http://127.0.0.1:8080", requiredInProduction: true),
            audience: env.string("JWT_AUDIENCE", default: "foodbackend"),
            leeway: env.milliseconds("JWT_LEEWAY_MS", default: 30_000, range: 0...300_000),
            minRefreshInterval: env.milliseconds("JWKS_MIN_REFRESH_MS", default: 5_000, range: 0...3_600_000)
        )
    }
}
