import Logging
import ServiceKitTokens
import ServiceLifecycle

/// Loads the token issuer's public keys as the process starts, and again until they load. Without
/// it the first request carrying a token fetched them, and a service started beside auth (as compose
/// and Kubernetes start them) refused tokens with `503 keys_unavailable` if that first fetch came
/// while auth was not answering yet or met a passing network failure. Requests still fetch the keys
/// themselves when a token names one they lack (`JWKSCache`).
public struct SigningKeysPrefetch: Service {
    let tokens: TokenVerifier
    let retryInterval: Duration
    let logger: Logger

    /// `config`'s minimum refresh interval spaces the attempts, since a fetch sooner does nothing.
    public init(tokens: TokenVerifier, config: TokenConfig, logger: Logger) {
        self.tokens = tokens
        self.retryInterval = max(config.minRefreshInterval, .milliseconds(200))
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var attempts = 0
            while !Task.isCancelled {
                attempts += 1
                try? await tokens.reload(reason: "start")
                if tokens.fetchCount > 0 { break }
                if attempts == 1 { logger.info("signing keys not loaded yet; trying again", metadata: ["every": "\(retryInterval)"]) }
                try? await Task.sleep(for: retryInterval)
            }
        }
        try? await gracefulShutdown()
    }
}
