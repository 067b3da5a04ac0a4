import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import ServiceKit
import ServiceLifecycle

/// Builds the gateway: one path for every request, the router's. The kit's request id, logging and
/// problem middleware and the edge's rules (`EdgeMiddleware`) around the proxy (`ProxyMiddleware`)
/// and the gateway's own routes: health, app-link files, the merged API document and the live event
/// stream; readiness (one line per upstream) and metrics on its internal listener.
func buildApplication(_ config: GatewayConfig) throws -> some ApplicationProtocol {
    var logger = Logger(label: "gateway")
    logger.logLevel = config.logLevel
    let registry = MetricsRegistry()
    let pools = try config.upstreams.mapValues { try UpstreamPool(baseURL: $0, connectTimeout: config.connectTimeout) }

    let metrics = HTTPMetrics(registry: registry)
    // The live stream's token checks and the rate limits' share one verifier and its cache.
    let signatureChecks = registry.makeCounter(
        descriptor: .init(metricName: "gateway_token_signature_checks", unitName: "total", helpText: "Access-token signatures checked (rate limits and the live stream)"))
    let live = LiveEventsSetup(config, logger: logger, onSignatureCheck: { signatureChecks.increment() })
    let limiter = EdgeRateLimiter(
        table: config.rateLimits, redis: config.rateLimits.isEmpty ? nil : RedisClient(configuration: config.redis, logger: logger),
        verifier: live.events.tokens, tokenChecksPerAddress: config.tokenChecksPerAddress, logger: logger)
    let table = RouteTable.standard
    let routeLabels = Dictionary(uniqueKeysWithValues: pools.keys.map { ($0, "proxy:" + $0) })

    let router = Router(context: ServiceRequestContext.self)
    // Proxied requests are counted per upstream (`route="proxy:social"`).
    router.add(
        middleware: TelemetryMiddleware(
            metrics: metrics, trustedProxies: config.trustedProxies,
            routeOutsideRouter: { request in table.service(for: request.uri.path).flatMap { routeLabels[$0] } }))
    // The edge's rules for every request, proxied or the gateway's own: CORS, body limits, rate limits.
    let bodyBuffers = BodyBuffers(capacity: config.bodyBufferBytes)
    router.add(middleware: EdgeMiddleware(cors: config.cors, bodyLimits: config.bodyLimits, routes: table, bodyBuffers: bodyBuffers, limiter: limiter))
    router.add(middleware: ProblemMiddleware())
    let routeIndex = RouteIndex()
    router.add(middleware: MethodNotAllowedMiddleware(index: routeIndex))
    router.add(
        middleware: ProxyMiddleware(
            table: table, pools: pools, timeout: config.upstreamTimeout, bodyBuffers: bodyBuffers, endedSessions: (live.ended, live.events.tokens)))
    let health = GatewayHealthRoutes(pools: pools, metrics: registry)
    health.add(to: router)
    config.appLinks.add(to: router)
    // The gateway's own openapi.yaml and each upstream's, merged (`GET /openapi.json`).
    let openAPI = MergedOpenAPIDocument(
        own: try MergedOpenAPIDocument.ownDocument(), pools: pools, lifetime: config.openAPILifetime, timeout: config.upstreamTimeout, logger: logger)
    openAPI.add(to: router)
    // The live event stream (`GET /v1/events`): one Redis subscription for the process.
    LiveEventRoutes(events: live.events).add(to: router)
    routeIndex.record(router)
    let adminRouter = Router(context: ServiceRequestContext.self)
    adminRouter.add(middleware: ProblemMiddleware())
    health.addAdmin(to: adminRouter)

    var app = ServiceApplication(
        router: router,
        listener: config.listener,
        serverName: GatewayHTTP1Channel.serverName,
        childChannel: { [logger] responder in
            GatewayHTTP1Channel(http1: HTTP1Channel(responder: responder), clientTimeout: config.clientTimeout, bodyMinRate: config.clientBodyMinRate, logger: logger)
        },
        services: [
            Closer { for pool in pools.values { pool.shutdown() } },
            live.service,
            SigningKeysPrefetch(tokens: live.events.tokens, logger: logger),
            limiter,
            AdminListener(router: adminRouter, options: config.admin, serverName: GatewayHTTP1Channel.serverName, logger: logger),
            ShutdownNotice(logger: logger),
        ],
        logger: logger
    )
    // The port opens once the endings of the last generation are read from the event stream (or
    // Redis has refused, or not answered within `firstReadWait`): a gateway started by a deploy
    // would otherwise pass a signed-out token unmarked until its subscription's first read is done.
    let hub = live.events.hub
    app.beforeServerStarts { [wait = config.liveEvents.firstReadWait] in
        await cancelWhenGracefulShutdown { await hub.readEndingsBeforeServing(within: wait) }
    }
    return app
}
