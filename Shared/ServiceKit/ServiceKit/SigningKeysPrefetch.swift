import Logging
import ServiceKitTokens
import ServiceLifecycle

/// Loads the token issuer's public keys as the process starts, so that no request waits for them.
/// Without it the first request carrying a token fetched them, and a fetch that failed then (auth
/// not answering yet, a name lookup lost on the container network) refused that request and every
/// other token with `503 keys_unavailable` until the next attempt. It tries again, each wait twice
/// the last up to `maxRetryInterval`, until the keys load or the process stops. Requests still fetch
/// the keys themselves when a token names one the cache lacks (`JWKSCache`).
public struct SigningKeysPrefetch: Service {
    let tokens: TokenVerifier
    let firstRetryInterval: Duration
    let maxRetryInterval: Duration
    let logger: Logger

    public init(tokens: TokenVerifier, firstRetryInterval: Duration = .seconds(1), maxRetryInterval: Duration = .seconds(30), logger: Logger) {
        self.tokens = tokens
        self.firstRetryInterval = firstRetryInterval
        self.maxRetryInterval = max(firstRetryInterval, maxRetryInterval)
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var wait = firstRetryInterval
            while !Task.isCancelled {
                try? await tokens.reload(reason: "start")
                if tokens.fetchCount > 0 { return }
                logger.info("signing keys not loaded yet; trying again", metadata: ["in": "\(wait)"])
                try? await Task.sleep(for: wait)
                wait = min(wait * 2, maxRetryInterval)
            }
        }
        // A service that returns would end the group: this one waits for the process to stop.
        try? await gracefulShutdown()
    }
}
