import AsyncHTTPClient
import Crypto
import Foundation
import JWTKit
import Logging
import ServiceKit

/// Where a provider's ID tokens come from and whom they must be for. Tests point these at a local
/// issuer; production uses Apple's and Google's published values.
struct IdentityProviderConfig: Sendable {
    enum NonceStyle: Sendable {
        /// Apple puts SHA-256 (hex) of the raw nonce in the token.
        case sha256
        /// Google puts the nonce itself.
        case plain
    }

    var name: String
    var issuers: [String]
    var clientIDs: [String]
    var jwksURL: String
    var nonceStyle: NonceStyle
    /// The mail domains the provider runs, whose addresses it answers for. Elsewhere its
    /// `email_verified` says only that the address was checked once, when the account was made with
    /// it: someone who has since lost a company address still signs in with it.
    var ownDomains: Set<String>
    /// Google: the Workspace domain named in the token's `hd` is answered for too.
    var trustsHostedDomain: Bool

    /// `APPLE_CLIENT_IDS` (bundle ids and service ids, comma-separated) turns Apple sign-in on;
    /// `APPLE_ISSUER`, `APPLE_JWKS_URL` default to Apple's.
    static func apple(reading env: inout EnvironmentReader) -> IdentityProviderConfig? {
        provider(
            "APPLE", name: "apple", issuers: "https://appleid.apple.com", jwks: "https://appleid.apple.com/auth/keys", nonce: .sha256,
            ownDomains: ["icloud.com", "me.com", "mac.com", "privaterelay.appleid.com"], trustsHostedDomain: false, env: &env)
    }

    /// `GOOGLE_CLIENT_IDS` (the OAuth client ids of the apps) turns Google sign-in on;
    /// `GOOGLE_ISSUER` (comma-separated), `GOOGLE_JWKS_URL` default to Google's.
    static func google(reading env: inout EnvironmentReader) -> IdentityProviderConfig? {
        provider(
            "GOOGLE", name: "google", issuers: "https://accounts.google.com,accounts.google.com",
            jwks: "https://www.googleapis.com/oauth2/v3/certs", nonce: .plain,
            ownDomains: ["gmail.com", "googlemail.com"], trustsHostedDomain: true, env: &env)
    }

    private static func provider(
        _ prefix: String, name: String, issuers: String, jwks: String, nonce: NonceStyle, ownDomains: Set<String>, trustsHostedDomain: Bool,
        env: inout EnvironmentReader
    ) -> IdentityProviderConfig? {
        let clientIDs = list(env.optionalString("\(prefix)_CLIENT_IDS"))
        let issuerList = list(env.string("\(prefix)_ISSUER", default: issuers))
        let url = env.url("\(prefix)_JWKS_URL", default: jwks, schemes: ["https", "http"])
        guard !clientIDs.isEmpty, url != nil else { return nil }
        return IdentityProviderConfig(
            name: name, issuers: issuerList, clientIDs: clientIDs, jwksURL: env.values["\(prefix)_JWKS_URL"] ?? jwks, nonceStyle: nonce,
            ownDomains: ownDomains, trustsHostedDomain: trustsHostedDomain)
    }

    /// Whether the provider answers for `email`: one of its own domains, or (Google) the Workspace
    /// domain the token names in `hd`.
    func answersFor(_ email: String, hostedDomain: String?) -> Bool {
        guard let at = email.lastIndex(of: "@") else { return false }
        let domain = email[email.index(after: at)...].lowercased()
        if ownDomains.contains(domain) { return true }
        guard trustsHostedDomain, let hostedDomain = hostedDomain?.lowercased(), !hostedDomain.isEmpty else { return false }
        return domain == hostedDomain
    }

    private static func list(_ text: String?) -> [String] {
        (text ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}

/// What a verified ID token says about the person.
struct VerifiedIdentity: Sendable, Equatable {
    var provider: String
    var subject: String
    var email: String?
    var emailVerified: Bool
    /// The provider verified the address *and* answers for it: an address on a mail domain it runs
    /// (Apple: iCloud and the private relay; Google: Gmail), or Google's Workspace domain named by the
    /// token's `hd`. A provider marks any address verified once, when the account is made with it,
    /// and keeps saying so after the person has lost it (left the company that gave it). Only a
    /// vouched address finds or proves an account by email.
    var emailVouched: Bool
    var isPrivateRelay: Bool
    var name: String?
    /// The token's expiry plus the leeway it is accepted with: until then it could be sent again.
    var usableUntil: Date
    /// The text that was signed (`header.payload`): what a sign-in without a nonce is spent under.
    /// The signature is not part of it, so a second valid signature of the same claims is the same
    /// sign-in.
    var signedPart: Substring
}

/// The claims of an Apple or Google ID token. `email_verified` is a boolean at Google and, at Apple,
/// sometimes the string "true".
struct IdentityTokenClaims: JWTPayload {
    var iss: String
    var sub: String
    var aud: AudienceClaim
    var exp: Date
    var iat: Date?
    var nonce: String?
    var email: String?
    var emailVerified: Bool?
    var isPrivateEmail: Bool?
    var name: String?
    /// Google's hosted domain: present when the account belongs to that Google Workspace domain.
    var hd: String?

    enum CodingKeys: String, CodingKey {
        case iss, sub, aud, exp, iat, nonce, email, name, hd
        case emailVerified = "email_verified", isPrivateEmail = "is_private_email"
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        iss = try container.decode(String.self, forKey: .iss)
        sub = try container.decode(String.self, forKey: .sub)
        aud = try container.decode(AudienceClaim.self, forKey: .aud)
        exp = Date(timeIntervalSince1970: try container.decode(Double.self, forKey: .exp))
        iat = try container.decodeIfPresent(Double.self, forKey: .iat).map(Date.init(timeIntervalSince1970:))
        nonce = try container.decodeIfPresent(String.self, forKey: .nonce)
        email = try container.decodeIfPresent(String.self, forKey: .email)
        name = try container.decodeIfPresent(String.self, forKey: .name)
        hd = try container.decodeIfPresent(String.self, forKey: .hd)
        emailVerified = Self.flexibleBool(container, .emailVerified)
        isPrivateEmail = Self.flexibleBool(container, .isPrivateEmail)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(iss, forKey: .iss)
        try container.encode(sub, forKey: .sub)
        try container.encode(aud, forKey: .aud)
        try container.encode(exp.timeIntervalSince1970, forKey: .exp)
        try container.encodeIfPresent(iat?.timeIntervalSince1970, forKey: .iat)
        try container.encodeIfPresent(nonce, forKey: .nonce)
        try container.encodeIfPresent(email, forKey: .email)
        try container.encodeIfPresent(emailVerified, forKey: .emailVerified)
        try container.encodeIfPresent(isPrivateEmail, forKey: .isPrivateEmail)
        try container.encodeIfPresent(name, forKey: .name)
        try container.encodeIfPresent(hd, forKey: .hd)
    }

    private static func flexibleBool(_ container: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) -> Bool? {
        if let value = try? container.decodeIfPresent(Bool.self, forKey: key) { return value }
        if let text = try? container.decodeIfPresent(String.self, forKey: key) { return text.lowercased() == "true" }
        return nil
    }

    /// Checked by `IdentityTokenVerifier`, which knows the provider's issuers and client ids.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Why an ID token was refused: 401 `invalid_id_token` with the reason.
struct IdentityTokenError: Error, CustomStringConvertible {
    var reason: String
    var description: String { reason }
    var apiError: APIError { .unauthorized("The \(reason).", code: "invalid_id_token") }
}

/// Verifies a provider's ID token as the provider documents: signature against its JWKS (cached,
/// refreshed on an unknown `kid`), issuer, audience among our client ids, expiry, nonce.
final class IdentityTokenVerifier: Sendable {
    let config: IdentityProviderConfig
    private let keys: JWKSCache
    private let leeway: TimeInterval = 60

    init(config: IdentityProviderConfig, httpClient: HTTPClient, logger: Logger) {
        self.config = config
        keys = JWKSCache(
            source: HTTPJWKSSource(url: config.jwksURL, httpClient: httpClient), algorithms: ["RS256", "ES256"],
            minRefreshInterval: .seconds(10), logger: logger)
    }

    func verify(_ token: String, nonce: String?, now: Date = Date()) async throws -> VerifiedIdentity {
        // One spelling per token: base64url decoders take padding, `+` and `/`, and ignore the unused
        // low bits of the last character, so a spent token could come back spelt anew.
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, segments.allSatisfy({ !$0.isEmpty && Base64URL.isCanonical($0) }) else {
            throw IdentityTokenError(reason: "ID token is malformed (each part must be unpadded base64url)")
        }
        let header: JWTHeaderPeek.Header
        do { header = try JWTHeaderPeek.header(of: token) } catch { throw IdentityTokenError(reason: "ID token is malformed") }
        guard let alg = header.alg, ["RS256", "ES256"].contains(alg) else {
            throw IdentityTokenError(reason: "ID token uses algorithm \(header.alg ?? "none"), not one \(config.name) signs with")
        }
        guard let kid = header.kid else { throw IdentityTokenError(reason: "ID token has no key id") }
        let collection: JWTKeyCollection
        do {
            collection = try await keys.keys(containing: kid)
        } catch .keysUnavailable {
            // Why (the fetch's own error, naming hosts) is logged by the key cache, not told the client.
            throw APIError(.serviceUnavailable, code: "provider_unavailable", detail: "\(config.name) keys cannot be fetched right now; try again shortly.")
        } catch {
            throw IdentityTokenError(reason: "ID token is signed with a key \(config.name) does not publish")
        }
        let claims: IdentityTokenClaims
        do {
            claims = try await collection.verify(token, as: IdentityTokenClaims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw IdentityTokenError(reason: "ID token signature does not verify")
        } catch {
            throw IdentityTokenError(reason: "ID token cannot be read (its payload, or a claim of the wrong type)")
        }
        guard config.issuers.contains(claims.iss) else { throw IdentityTokenError(reason: "ID token was issued by \(claims.iss), not by \(config.name)") }
        guard claims.aud.value.contains(where: config.clientIDs.contains) else { throw IdentityTokenError(reason: "ID token is for another app") }
        guard now.timeIntervalSince(claims.exp) < leeway else { throw IdentityTokenError(reason: "ID token has expired") }
        if let iat = claims.iat, iat.timeIntervalSince(now) > leeway { throw IdentityTokenError(reason: "ID token is issued in the future") }
        switch (nonce, claims.nonce) {
        case (nil, nil):
            break
        case (let sent?, let carried?):
            let expected = config.nonceStyle == .sha256 ? SHA256.hash(data: Data(sent.utf8)).map { String(format: "%02x", $0) }.joined() : sent
            guard carried == expected else { throw IdentityTokenError(reason: "ID token nonce does not match the nonce sent") }
        case (nil, _?):
            throw IdentityTokenError(reason: "ID token carries a nonce; send the raw nonce with it")
        case (_?, nil):
            throw IdentityTokenError(reason: "ID token carries no nonce but one was sent")
        }
        guard !claims.sub.isEmpty else { throw IdentityTokenError(reason: "ID token has no subject") }
        let email = claims.email.map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
        let verified = claims.emailVerified ?? false
        return VerifiedIdentity(
            provider: config.name, subject: claims.sub, email: email, emailVerified: verified,
            emailVouched: verified && (email.map { config.answersFor($0, hostedDomain: claims.hd) } ?? false),
            isPrivateRelay: claims.isPrivateEmail ?? (email?.lowercased().hasSuffix("@privaterelay.appleid.com") ?? false),
            name: claims.name, usableUntil: claims.exp.addingTimeInterval(leeway),
            signedPart: token[..<segments[1].endIndex]
        )
    }

}
