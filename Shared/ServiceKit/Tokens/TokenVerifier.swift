import Foundation
import JWTKit
import Logging
import Models
import ServiceKitHTTP
import Synchronization

/// Checks access tokens locally against the issuer's cached public keys: no call per request. An
/// unknown `kid` (the issuer rotated its key) refreshes the keys, at most once per `minRefreshInterval`.
public final class TokenVerifier: Sendable {
    /// Keys are reloaded at least this often, so a key the issuer withdrew stops being trusted.
    package static let maxKeyAge: Duration = JWKSCache.maxKeyAge

    private let config: TokenConfig
    private let keys: JWKSCache
    private let verified = VerifiedTokens()
    private let signaturesChecked = Atomic<Int>(0)
    private let onSignatureCheck: (@Sendable () -> Void)?

    /// `onSignatureCheck` hears of each signature checked (a metric): the costly step, which a flood
    /// of made-up tokens would otherwise make unseen.
    public init(source: any JWKSSource, config: TokenConfig, logger: Logger, onSignatureCheck: (@Sendable () -> Void)? = nil) {
        self.config = config
        self.keys = JWKSCache(source: source, algorithms: ["ES256"], minRefreshInterval: config.minRefreshInterval, logger: logger)
        self.onSignatureCheck = onSignatureCheck
    }

    /// How many times the keys were fetched, for tests and metrics.
    package var fetchCount: Int { keys.fetchCount }

    /// How many signatures this verifier has checked (tokens found among those verified recently
    /// are not checked again), for tests and metrics.
    package var signatureCheckCount: Int { signaturesChecked.load(ordering: .relaxed) }

    /// Verifies signature and claims and returns the caller. A client sends one token for up to 15
    /// minutes, so a token verified in the last minute is not verified again (the signature check
    /// and two JSON decodes were a quarter of a profile read); its expiry is still checked each time.
    public func verify(_ token: String, now: Date = Date()) async throws(TokenError) -> Caller {
        try await verifyExpiring(token, now: now).caller
    }

    /// `verify`, with the token's expiry: for what stays open as long as the token is good (the
    /// gateway's event stream ends at it).
    public func verifyExpiring(_ token: String, now: Date = Date()) async throws(TokenError) -> (caller: Caller, expiresAt: Date) {
        if let (caller, expiresAt) = verified.lookup(token) {
            guard now.timeIntervalSince(expiresAt) < leeway else { throw .expired }
            return (caller, expiresAt)
        }
        let (caller, expiresAt) = try await verifyFully(token, now: now)
        verified.store(token, caller: caller, expiresAt: expiresAt)
        return (caller, expiresAt)
    }

    /// The caller of a token verified within the last minute and not expired, without checking
    /// anything now: for decisions that may not wait for a check (the gateway's rate limits).
    package func cachedCaller(_ token: String, now: Date = Date()) -> Caller? {
        cachedCallerExpiring(token, now: now)?.caller
    }

    /// `cachedCaller`, with the token's expiry.
    public func cachedCallerExpiring(_ token: String, now: Date = Date()) -> (caller: Caller, expiresAt: Date)? {
        guard let (caller, expiresAt) = verified.lookup(token), now.timeIntervalSince(expiresAt) < leeway else { return nil }
        return (caller, expiresAt)
    }

    private var leeway: TimeInterval {
        TimeInterval(config.leeway.components.seconds) + TimeInterval(config.leeway.components.attoseconds) / 1e18
    }

    private func verifyFully(_ token: String, now: Date) async throws(TokenError) -> (Caller, Date) {
        let header = try JWTHeaderPeek.header(of: token)
        guard header.alg == "ES256" else { throw .unsupportedAlgorithm(header.alg ?? "none") }
        guard let kid = header.kid, !kid.isEmpty else { throw .malformed("no kid in header") }
        let collection = try await keys.keys(containing: kid)
        signaturesChecked.add(1, ordering: .relaxed)
        onSignatureCheck?()
        let claims: AccessTokenClaims
        do {
            claims = try await collection.verify(token, as: AccessTokenClaims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw .badSignature
        } catch {
            // Not the decoder's own words: they name this code's types and fields.
            throw .malformed("its payload, or a claim of the wrong type, cannot be read")
        }
        guard claims.iss.value == config.issuer else { throw .wrongIssuer(claims.iss.value) }
        guard claims.aud.value.contains(config.audience) else { throw .wrongAudience }
        guard now.timeIntervalSince(claims.exp.value) < leeway else { throw .expired }
        if let nbf = claims.nbf, nbf.value.timeIntervalSince(now) > leeway { throw .notYetValid }
        guard let userID = UUID(parsing: claims.sub.value) else { throw .invalidClaims("sub is not a user id") }
        let sessionID = claims.sid.flatMap(UUID.init(parsing:))
        return (Caller(userID: userID, sessionID: sessionID, roles: Set(claims.roles.compactMap(Role.init(rawValue:))), emailVerified: claims.emailVerified), claims.exp.value)
    }

    /// Fetches the keys unless they were fetched within `minRefreshInterval`.
    package func reload(reason: String = "start") async throws(TokenError) {
        try await keys.reload(reason: reason)
    }
}
