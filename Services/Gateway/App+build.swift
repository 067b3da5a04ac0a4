import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import ServiceKit

/// Builds the gateway: the kit's request id, logging and problem middleware around the proxy, and
/// the gateway's own health, readiness (one line per upstream) and metrics.
func buildApplication(_ config: GatewayConfig) throws -> some ApplicationProtocol {
    var logger = Logger(label: "gateway")
    logger.logLevel = config.logLevel
    let registry = MetricsRegistry()
    let pools = try config.upstreams.mapValues { try UpstreamPool(baseURL: $0, connectTimeout: config.connectTimeout) }

    let metrics = HTTPMetrics(registry: registry)
    // Nearly every proxied request is answered in the channel pipeline, before the router.
    let proxy = GatewayProxy(table: .standard, pools: pools, timeout: config.upstreamTimeout, metrics: metrics,
                             trustedProxies: config.trustedProxies, logger: logger, clientTimeout: config.clientTimeout)

    let router = Router(context: ServiceRequestContext.self)
    // Proxied requests are counted per upstream (`route="proxy:social"`).
    router.add(middleware: TelemetryMiddleware(metrics: metrics, trustedProxies: config.trustedProxies,
                                               routeOutsideRouter: { proxy.routeLabel(for: $0.uri.path) }))
    router.add(middleware: ProblemMiddleware())
    // Requests whose body streams (see `ProxyChannelHandler`).
    router.add(middleware: ProxyMiddleware(table: .standard, pools: pools, timeout: config.upstreamTimeout))
    GatewayHealthRoutes(pools: pools, metrics: registry, internalNetworks: config.internalNetworks).add(to: router)

    return ServiceApplication(
        router: router,
        listener: config.listener,
        serverName: ProxyChannelHandler.serverName,
        childChannel: { responder in GatewayHTTP1Channel(http1: HTTP1Channel(responder: responder), proxy: proxy) },
        services: [Closer { for pool in pools.values { pool.shutdown() } }, ShutdownNotice(logger: logger)],
        logger: logger
    )
}

/// The gateway's own `/healthz`, `/readyz` (each upstream's `/readyz`) and `/metrics`; the last two
/// only to clients in `internalNetworks` (404 to others, as for a route that does not exist).
struct GatewayHealthRoutes {
    let pools: [String: UpstreamPool]
    let metrics: MetricsRegistry
    let internalNetworks: TrustedProxies

    struct Status: Codable {
        var status: String
        var upstreams: [String: String]
    }

    func add(to router: Router<ServiceRequestContext>) {
        router.get("healthz") { _, _ in try jsonResponse(Status(status: "ok", upstreams: [:])) }
        router.get("readyz") { _, context -> Response in
            try requireInternal(context)
            let results = await withTaskGroup(of: (String, String).self) { group in
                for (service, pool) in pools {
                    group.addTask { (service, await probe(pool)) }
                }
                var results: [String: String] = [:]
                for await (service, result) in group { results[service] = result }
                return results
            }
            let ready = results.values.allSatisfy { $0 == "ok" }
            return try jsonResponse(Status(status: ready ? "ready" : "not_ready", upstreams: results), status: ready ? .ok : .serviceUnavailable)
        }
        router.get("metrics") { _, context in
            try requireInternal(context)
            return metricsResponse(metrics)
        }
    }

    func requireInternal(_ context: ServiceRequestContext) throws {
        guard internalNetworks.contains(context.clientAddress) else { throw HTTPError(.notFound) }
    }

    func probe(_ pool: UpstreamPool) async -> String {
        do {
            let response = try await pool.execute(HTTPRequestHead(version: .http1_1, method: .GET, uri: "/readyz"), body: .none, deadline: .now() + .seconds(2))
            if case .stream(let body) = response.body { for try await _ in body {} }
            return response.head.status == .ok ? "ok" : "not ready (\(response.head.status.code))"
        } catch {
            return "unreachable"
        }
    }
}
