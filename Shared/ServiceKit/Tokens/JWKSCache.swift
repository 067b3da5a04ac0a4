import JWTKit
import Logging
import Synchronization

/// An issuer's public keys, fetched from its JWKS and cached: an unknown `kid` (the issuer rotated)
/// refreshes them, at most once per `minRefreshInterval` (a second after a failed fetch), concurrent
/// callers sharing one fetch; keys older than `maxKeyAge` are fetched again. Used for our own access
/// tokens and for the ID tokens of Apple and Google. Only keys for `algorithms` are loaded, so a
/// token cannot pick a weaker one.
public final class JWKSCache: Sendable {
    private struct Cache {
        var keys = JWTKeyCollection()
        var kids: Set<String> = []
        var lastFetch: ContinuousClock.Instant?
        var lastLoaded: ContinuousClock.Instant?
        var lastFailure: ContinuousClock.Instant?
        var lastError: String?
        var fetchCount = 0
    }

    package static let maxKeyAge: Duration = .seconds(600)
    /// After a failed fetch the next may come this soon (or after `minRefreshInterval`, if shorter):
    /// the issuer did not answer, which is no reason to refuse every token for the whole interval
    /// once it does (a service started before auth, a passing network failure).
    package static let retryAfterFailure: Duration = .seconds(1)

    private let source: any JWKSSource
    private let algorithms: Set<String>
    private let minRefreshInterval: Duration
    private let logger: Logger
    private let cache = Mutex(Cache())
    private let refresh = RefreshGate()

    /// `algorithms`: JWA names among ES256 and RS256.
    public init(source: any JWKSSource, algorithms: Set<String>, minRefreshInterval: Duration, logger: Logger) {
        self.source = source
        self.algorithms = algorithms
        self.minRefreshInterval = minRefreshInterval
        self.logger = logger
    }

    package var fetchCount: Int { cache.withLock { $0.fetchCount } }

    /// The keys, once they include `kid`; throws `unknownKey` if even fresh keys do not.
    public func keys(containing kid: String) async throws(TokenError) -> JWTKeyCollection {
        let (known, keys, stale) = cache.withLock { cache in
            (cache.kids.contains(kid), cache.keys, cache.lastLoaded.map { ContinuousClock.now - $0 > Self.maxKeyAge } ?? true)
        }
        if known && !stale { return keys }
        do {
            try await reload(reason: known ? "max age" : kid)
        } catch {
            // Stale keys are still better than none while the issuer is unreachable.
            if known { return keys }
            throw error
        }
        let (knownNow, keysNow, neverLoaded, lastError) = cache.withLock { ($0.kids.contains(kid), $0.keys, $0.lastLoaded == nil, $0.lastError) }
        guard knownNow else {
            // Keys that could not be fetched (or whose fetch was cancelled) are a 503, not the caller's fault.
            if neverLoaded || (lastError != nil && cache.withLock({ $0.kids.isEmpty })) { throw .keysUnavailable(lastError ?? "not loaded yet") }
            throw .unknownKey(kid)
        }
        return keysNow
    }

    /// Fetches the keys unless they were fetched within `minRefreshInterval`; concurrent callers share one fetch.
    package func reload(reason: String = "start") async throws(TokenError) {
        do {
            try await refresh.run { [self] in
                let recent = cache.withLock { cache in
                    let now = ContinuousClock.now
                    if let lastFetch = cache.lastFetch, now - lastFetch < minRefreshInterval { return true }
                    if let lastFailure = cache.lastFailure, now - lastFailure < min(minRefreshInterval, Self.retryAfterFailure) { return true }
                    return false
                }
                if recent { return }
                let jwks: JWKS
                do {
                    jwks = try await source.fetch()
                } catch {
                    // A fetch cancelled with the task that started it says nothing of the issuer.
                    if !Task.isCancelled {
                        cache.withLock { cache in
                            cache.lastFailure = .now
                            cache.lastError = "\(error)"
                        }
                        logger.warning("cannot fetch JWKS", metadata: ["error": "\(error)"])
                    }
                    throw TokenError.keysUnavailable("\(error)")
                }
                let collection = JWTKeyCollection()
                var kids: Set<String> = []
                for jwk in jwks.keys where accepts(jwk) {
                    guard let kid = jwk.keyIdentifier else { continue }
                    do {
                        try await collection.add(jwk: jwk)
                        kids.insert(kid.string)
                    } catch {
                        logger.warning("skipping unusable JWK", metadata: ["kid": "\(kid.string)", "error": "\(error)"])
                    }
                }
                cache.withLock { cache in
                    cache.keys = collection
                    cache.kids = kids
                    cache.lastFetch = .now
                    cache.lastLoaded = .now
                    cache.lastFailure = nil
                    cache.lastError = nil
                    cache.fetchCount += 1
                }
                logger.debug("loaded JWKS", metadata: ["kids": "\(kids.sorted())", "reason": "\(reason)"])
            }
        } catch let error as TokenError {
            throw error
        } catch {
            throw .keysUnavailable("\(error)")
        }
    }

    private func accepts(_ jwk: JWK) -> Bool {
        switch jwk.keyType {
        case .ecdsa:
            return algorithms.contains("ES256") && jwk.curve?.rawValue == "P-256" && (jwk.algorithm == nil || jwk.algorithm == .es256)
        case .rsa:
            return algorithms.contains("RS256") && (jwk.algorithm == nil || jwk.algorithm == .rs256)
        default:
            return false
        }
    }
}
