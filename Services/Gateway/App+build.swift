import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceKit

/// Builds the gateway: the kit's request id, logging and problem middleware around the proxy, and
/// the gateway's own health, readiness (one line per upstream) and metrics.
func buildApplication(_ config: GatewayConfig) throws -> some ApplicationProtocol {
    var logger = Logger(label: "gateway")
    logger.logLevel = config.logLevel
    let registry = MetricsRegistry()
    var clientConfig = HTTPClient.Configuration()
    clientConfig.timeout.connect = TimeAmount(config.connectTimeout)
    clientConfig.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
    clientConfig.decompression = .disabled
    clientConfig.redirectConfiguration = .disallow
    // No tracer is bootstrapped; without this every proxied request still opened a no-op span
    // (about 5% of the gateway's CPU per request).
    clientConfig.tracing.tracer = nil
    let httpClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfig)

    let router = Router(context: ServiceRequestContext.self)
    router.add(middleware: TelemetryMiddleware(metrics: HTTPMetrics(registry: registry), trustedProxies: config.trustedProxies))
    router.add(middleware: ProblemMiddleware())
    router.add(middleware: ProxyMiddleware(table: .standard, upstreams: config.upstreams, httpClient: httpClient, timeout: config.upstreamTimeout))
    GatewayHealthRoutes(upstreams: config.upstreams, httpClient: httpClient, metrics: registry).add(to: router)

    return Application(
        router: router,
        configuration: .init(address: .hostname(config.host, port: config.port), serverName: "gateway"),
        services: [Closer { try? await httpClient.shutdown() }, ShutdownNotice(logger: logger)],
        logger: logger
    )
}

/// The gateway's own `/healthz`, `/readyz` (each upstream's `/readyz`) and `/metrics`.
struct GatewayHealthRoutes {
    let upstreams: [String: String]
    let httpClient: HTTPClient
    let metrics: MetricsRegistry

    struct Status: Codable {
        var status: String
        var upstreams: [String: String]
    }

    func add(to router: Router<ServiceRequestContext>) {
        router.get("healthz") { _, _ in try jsonResponse(Status(status: "ok", upstreams: [:])) }
        router.get("readyz") { _, _ -> Response in
            let results = await withTaskGroup(of: (String, String).self) { group in
                for (service, base) in upstreams {
                    group.addTask { (service, await probe(base + "/readyz")) }
                }
                var results: [String: String] = [:]
                for await (service, result) in group { results[service] = result }
                return results
            }
            let ready = results.values.allSatisfy { $0 == "ok" }
            return try jsonResponse(Status(status: ready ? "ready" : "not_ready", upstreams: results), status: ready ? .ok : .serviceUnavailable)
        }
        router.get("metrics") { _, _ in metricsResponse(metrics) }
    }

    func probe(_ url: String) async -> String {
        do {
            let response = try await httpClient.execute(HTTPClientRequest(url: url), timeout: .seconds(2))
            _ = try? await response.body.collect(upTo: 64 * 1024)
            return response.status == .ok ? "ok" : "not ready (\(response.status.code))"
        } catch {
            return "unreachable"
        }
    }
}
