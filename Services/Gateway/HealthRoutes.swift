import Hummingbird
import HummingbirdCore
import NIOCore
import NIOHTTP1
import ServiceKit

/// The gateway's own `/healthz` on the public port, and on the internal listener `/healthz`, `/readyz`
/// (each upstream answers `/healthz` on its public port, which opens once its migrations are done)
/// and `/metrics`. The internal listener's address is its access control: loopback by default.
struct GatewayHealthRoutes {
    let pools: [String: UpstreamPool]
    let metrics: MetricsRegistry

    struct Status: Codable {
        var status: String
        var upstreams: [String: String]
    }

    func add(to router: Router<ServiceRequestContext>) {
        router.get("healthz") { _, _ in try jsonResponse(Status(status: "ok", upstreams: [:])) }
    }

    func addAdmin(to router: Router<ServiceRequestContext>) {
        router.get("healthz") { _, _ in try jsonResponse(Status(status: "ok", upstreams: [:])) }
        router.get("readyz") { _, _ -> Response in
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
        router.get("metrics") { _, _ in metricsResponse(metrics) }
    }

    func probe(_ pool: UpstreamPool) async -> String {
        do {
            let response = try await pool.execute(HTTPRequestHead(version: .http1_1, method: .GET, uri: "/healthz"), body: .none, deadline: .now() + .seconds(2))
            if case .stream(let body) = response.body { for try await _ in body {} }
            return response.head.status == .ok ? "ok" : "not ready (\(response.head.status.code))"
        } catch {
            return "unreachable"
        }
    }
}
