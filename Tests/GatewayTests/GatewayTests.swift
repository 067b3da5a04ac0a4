import Foundation
@testable import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Models
import NIOCore
import ServiceKit
import Synchronization
import TestSupport
import Testing

/// A stand-in upstream: a real HTTP server on loopback that echoes what reached it.
final class EchoUpstream: Sendable {
    struct Echo: Codable, ResponseEncodable {
        var service: String
        var method: String
        var path: String
        var headers: [String: String]
        var bodyBytes: Int
    }

    let name: String
    private let server = LocalServer()

    init(name: String) { self.name = name }

    var baseURL: String { server.baseURL }

    func start() async throws {
        let router = Router()
        let name = self.name
        router.get("readyz") { _, _ in "ok" }
        router.get("slow") { _, _ -> String in
            try await Task.sleep(for: .seconds(3))
            return "late"
        }
        router.on("**", method: .get) { request, context in try await Self.echo(name, request, context) }
        router.on("**", method: .post) { request, context in try await Self.echo(name, request, context) }
        router.on("**", method: .delete) { request, context in try await Self.echo(name, request, context) }
        try await server.start(router, label: name)
    }

    static func echo(_ name: String, _ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let body = try await request.body.collect(upTo: 64 << 20)
        var headers: [String: String] = [:]
        for field in request.headers { headers[field.name.canonicalName] = field.value }
        let echo = Echo(service: name, method: request.method.rawValue, path: request.uri.description, headers: headers, bodyBytes: body.readableBytes)
        return Response(status: .ok, headers: [.contentType: "application/json", .connection: "close, x-internal", HTTPField.Name("X-Internal")!: "secret", HTTPField.Name("X-Upstream")!: name],
                        body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(echo))))
    }

    func stop() { server.stop() }
}

@Suite struct GatewayTests {
    static func withGateway(timeout: Duration = .seconds(5), downService: String? = nil, upstreamOverrides: [String: String] = [:], trustedProxies: TrustedProxies = .none, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let auth = EchoUpstream(name: "auth")
        let social = EchoUpstream(name: "social")
        try await auth.start()
        try await social.start()
        defer { auth.stop(); social.stop() }
        let closedPort = try RedisServer.freePort()
        var upstreams = ["auth": auth.baseURL, "social": social.baseURL]
        for service in ["invitations", "entitlements", "nutrition"] { upstreams[service] = "http://127.0.0.1:\(closedPort)" }
        if let downService { upstreams[downService] = "http://127.0.0.1:\(closedPort)" }
        upstreams.merge(upstreamOverrides) { $1 }
        let config = GatewayConfig(host: "127.0.0.1", port: 0, logLevel: .warning, upstreams: upstreams, upstreamTimeout: timeout, connectTimeout: .seconds(1), trustedProxies: trustedProxies)
        try await buildApplication(config).test(.live) { client in try await body(client) }
    }

    static func echo(_ response: TestResponse) throws -> EchoUpstream.Echo {
        try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: response.body))
    }

    static func problem(_ response: TestResponse) throws -> Problem {
        #expect(response.headers[.contentType] == Problem.mediaType)
        return try JSONDecoder.api.decode(Problem.self, from: Data(buffer: response.body))
    }

    @Test func routesByPrefixOnWholeSegments() async throws {
        try await Self.withGateway { client in
            let login = try Self.echo(try await client.execute(uri: "/v1/auth/login?x=1", method: .post, body: ByteBuffer(string: "{}")))
            #expect(login.service == "auth" && login.path == "/v1/auth/login?x=1" && login.method == "POST" && login.bodyBytes == 2)
            #expect(try Self.echo(try await client.execute(uri: "/.well-known/jwks.json", method: .get)).service == "auth")
            #expect(try Self.echo(try await client.execute(uri: "/v1/admin/users/1/roles/coach", method: .delete)).service == "auth")
            #expect(try Self.echo(try await client.execute(uri: "/v1/profiles/me", method: .get)).service == "social")
            #expect(try Self.echo(try await client.execute(uri: "/v1/follow-requests", method: .get)).service == "social")

            let unrouted = try await client.execute(uri: "/v1/authors", method: .get)
            #expect(unrouted.status == .notFound)
            #expect(try Self.problem(unrouted).code == "not_found")
            #expect(try await client.execute(uri: "/v2/auth/login", method: .get).status == .notFound)
        }
    }

    @Test func requestIDsAndForwardingHeaders() async throws {
        try await Self.withGateway { client in
            let given = try await client.execute(uri: "/v1/auth/me", method: .get, headers: [.requestID: "trace-me", .forwardedFor: "203.0.113.9"])
            let echo = try Self.echo(given)
            #expect(echo.headers["x-request-id"] == "trace-me")
            #expect(given.headers[.requestID] == "trace-me")
            // A client's own X-Forwarded-For is not trusted: the gateway is the edge.
            #expect(echo.headers["x-forwarded-for"] == "127.0.0.1")

            let made = try await client.execute(uri: "/v1/auth/me", method: .get, headers: [.connection: "keep-alive, x-hop", HTTPField.Name("X-Hop")!: "1", HTTPField.Name("Keep-Alive")!: "timeout=5"])
            let madeEcho = try Self.echo(made)
            let id = try #require(made.headers[.requestID])
            #expect(UUID(uuidString: id) != nil)
            #expect(madeEcho.headers["x-request-id"] == id)
            // Connection-level headers never reach the upstream. (Swift's HTTP types drop the incoming
            // `Connection` field itself, so headers it names cannot be singled out beyond these.)
            #expect(madeEcho.headers["keep-alive"] == nil && madeEcho.headers["connection"] == nil)
            // Hop-by-hop headers of the upstream's response do not leak either.
            #expect(made.headers[HTTPField.Name("X-Internal")!] == nil)
            #expect(made.headers[HTTPField.Name("X-Upstream")!] == "auth")
        }
    }

    /// Behind a load balancer (`TRUSTED_PROXIES` names it), the client is the address it forwarded;
    /// what the client itself put before that is still not believed.
    @Test func aTrustedLoadBalancerNamesTheClient() async throws {
        try await Self.withGateway(trustedProxies: try TrustedProxies(parsing: "127.0.0.1/32")) { client in
            let behind = try await client.execute(uri: "/v1/auth/me", method: .get, headers: [.forwardedFor: "198.51.100.4, 203.0.113.9"])
            #expect(try Self.echo(behind).headers["x-forwarded-for"] == "203.0.113.9")
            let direct = try await client.execute(uri: "/v1/auth/me", method: .get)
            #expect(try Self.echo(direct).headers["x-forwarded-for"] == "127.0.0.1")
        }
    }

    @Test func streamsLargeBodiesBothWays() async throws {
        try await Self.withGateway { client in
            let body = ByteBuffer(repeating: 7, count: 8 * 1024 * 1024)
            let echo = try Self.echo(try await client.execute(uri: "/v1/profiles/me/avatar", method: .post, body: body))
            #expect(echo.bodyBytes == 8 * 1024 * 1024)
        }
    }

    @Test func aDownUpstreamIs503() async throws {
        try await Self.withGateway(timeout: .milliseconds(500)) { client in
            let down = try await client.execute(uri: "/v1/meals", method: .get, headers: [.requestID: "down-1"])
            #expect(down.status == .serviceUnavailable)
            let problem = try Self.problem(down)
            #expect(problem.code == "upstream_unavailable" && problem.requestID == "down-1")
            #expect(problem.detail?.contains("nutrition") == true)

        }
    }

    @Test func aSlowUpstreamIs504() async throws {
        let slow = EchoUpstream(name: "slow")
        try await slow.start()
        defer { slow.stop() }
        var upstreams: [String: String] = [:]
        for service in GatewayConfig.services.keys { upstreams[service] = slow.baseURL }
        let config = GatewayConfig(host: "127.0.0.1", port: 0, logLevel: .warning, upstreams: upstreams, upstreamTimeout: .milliseconds(300), connectTimeout: .seconds(1))
        // The echo upstream's /slow sleeps 3 s; a table routing /slow to it makes the gateway wait.
        let table = RouteTable(routes: [("/slow", "auth")])
        let router = Router(context: ServiceRequestContext.self)
        router.add(middleware: TelemetryMiddleware(metrics: HTTPMetrics(registry: MetricsRegistry())))
        router.add(middleware: ProblemMiddleware())
        let pool = try UpstreamPool(baseURL: slow.baseURL, connectTimeout: .seconds(1))
        defer { pool.shutdown() }
        router.add(middleware: ProxyMiddleware(table: table, pools: ["auth": pool], timeout: config.upstreamTimeout))
        try await Application(router: router).test(.live) { client in
            let response = try await client.execute(uri: "/slow", method: .get)
            #expect(response.status == .gatewayTimeout)
            #expect(try Self.problem(response).code == "upstream_timeout")
        }
    }

    @Test func readinessReportsEveryUpstream() async throws {
        try await Self.withGateway { client in
            let response = try await client.execute(uri: "/readyz", method: .get)
            #expect(response.status == .serviceUnavailable)
            let status = try JSONDecoder().decode(GatewayHealthRoutes.Status.self, from: Data(buffer: response.body))
            #expect(status.upstreams["auth"] == "ok" && status.upstreams["social"] == "ok")
            #expect(status.upstreams["nutrition"] == "unreachable")
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            _ = try await client.execute(uri: "/v1/auth/me", method: .get)
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains("http_requests_total"))
            // Proxied requests are counted per upstream, not as "unmatched".
            #expect(metrics.contains(#"route="proxy:auth""#), "\(metrics)")
        }
    }

    @Test func routeTableMatchesTheArchitecture() {
        let table = RouteTable.standard
        let expected: [String: String] = [
            "/v1/auth/login": "auth", "/v1/admin/users": "auth", "/.well-known/jwks.json": "auth",
            "/v1/profiles/x/follow": "social", "/v1/blocks": "social", "/v1/mutes": "social", "/v1/notifications/read": "social", "/v1/moderation/profiles/x/hide": "social",
            "/v1/clients": "invitations", "/v1/invitations/x": "invitations", "/v1/coach/clients": "invitations",
            "/v1/entitlements": "entitlements", "/v1/tiers": "entitlements", "/v1/usage": "entitlements", "/v1/purchases": "entitlements",
            "/v1/webhooks/app-store": "entitlements", "/v1/spaces/x": "entitlements",
            "/v1/nutrition/diet": "nutrition", "/v1/meals": "nutrition", "/v1/metrics/weight": "nutrition", "/v1/trends": "nutrition", "/v1/shared/x": "nutrition",
        ]
        for (path, service) in expected { #expect(table.service(for: path) == service, "\(path)") }
        for path in ["/metrics", "/healthz", "/v1/events", "/openapi.json", "/v1", "/v1/authx"] { #expect(table.service(for: path) == nil, "\(path)") }
    }
}
