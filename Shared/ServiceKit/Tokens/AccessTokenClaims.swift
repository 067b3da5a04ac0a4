import Foundation
import JWTKit
import Models
import ServiceKitCore
import ServiceKitHTTP

/// The claims of an access token as auth signs them (ES256, `kid` in the header).
public struct AccessTokenClaims: JWTPayload, Equatable {
    public var sub: SubjectClaim
    package var sid: String?
    public var roles: [String]
    public var emailVerified: Bool
    public var iss: IssuerClaim
    public var aud: AudienceClaim
    public var iat: IssuedAtClaim
    public var exp: ExpirationClaim
    package var nbf: NotBeforeClaim?

    public init(userID: UUID, sessionID: UUID?, roles: [Role], emailVerified: Bool, issuer: String, audience: String, issuedAt: Date, expiresAt: Date) {
        // Written as the JSON bodies write ids (lowercase), so a client can compare them as text.
        sub = SubjectClaim(value: userID.uuidString.lowercased())
        sid = sessionID?.uuidString.lowercased()
        self.roles = roles.map(\.rawValue)
        self.emailVerified = emailVerified
        iss = IssuerClaim(value: issuer)
        aud = AudienceClaim(value: [audience])
        iat = IssuedAtClaim(value: issuedAt)
        exp = ExpirationClaim(value: expiresAt)
        nbf = nil
    }

    /// The signature is checked by jwt-kit; the claims by `TokenVerifier`, which knows the expected
    /// issuer, audience and leeway.
    public func verify(using algorithm: some JWTAlgorithm) async throws {}

    enum CodingKeys: String, CodingKey {
        case sub, sid, roles, emailVerified = "email_verified", iss, aud, iat, exp, nbf
    }
}
