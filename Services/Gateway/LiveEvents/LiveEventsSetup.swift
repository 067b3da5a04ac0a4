import Logging
import ServiceKit
import ServiceLifecycle

/// The live event stream's parts, built from the gateway's configuration: the routes' `LiveEvents`
/// and the service that runs its Redis subscription for as long as the gateway runs.
struct LiveEventsSetup {
    let events: LiveEvents
    let service: LiveEventsService
    /// The sessions and accounts the subscription heard end, whose tokens the proxy refuses.
    let ended: EndedSessions

    /// `onSignatureCheck`: each token signature the shared verifier checks (the gateway's metric).
    init(_ config: GatewayConfig, logger: Logger, onSignatureCheck: (@Sendable () -> Void)? = nil) {
        let redis = RedisClient(configuration: config.redis, logger: logger)
        ended = EndedSessions(logger: logger)
        var subscriberConfig = config.redis
        subscriberConfig.poolSize = 1
        let hub = LiveHub(
            subscriber: RedisSubscriber(configuration: subscriberConfig, logger: logger), ended: ended,
            catchUp: EndingsCatchUp(redis: redis, stream: config.liveEvents.stream, ended: ended, logger: logger), logger: logger)
        // The process-wide HTTP client, which needs no shutdown: the keys are fetched rarely.
        let tokens = TokenVerifier(
            source: HTTPJWKSSource(url: config.tokens.jwksURL, httpClient: .shared), config: config.tokens, logger: logger, onSignatureCheck: onSignatureCheck)
        events = LiveEvents(hub: hub, redis: redis, tokens: tokens, config: config.liveEvents, logger: logger)
        service = LiveEventsService(hub: hub, redis: redis)
    }
}

/// Runs the hub's subscription; once it stops (after the server, which ends the streams first),
/// closes the Redis connections the streams used.
struct LiveEventsService: Service {
    let hub: LiveHub
    let redis: RedisClient

    func run() async throws {
        do {
            try await hub.run()
        } catch {
            await redis.close()
            throw error
        }
        await redis.close()
    }
}
