import Foundation
@testable import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Models
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

/// A stand-in upstream: a real HTTP server on loopback that echoes what reached it.
final class EchoUpstream: Sendable {
    struct Echo: Codable, ResponseEncodable {
        var service: String
        var method: String
        var path: String
        var headers: [String: String]
        var bodyBytes: Int
    }

    /// More than the kernel's buffers between the upstream and the gateway hold.
    static let refusalAtLength = 24 << 20

    let name: String
    private let server = LocalServer()
    /// How many `/pause` requests have reached it: a test can wait until one is in flight.
    let pausesArrived = Atomic<Int>(0)

    init(name: String) { self.name = name }

    var baseURL: String { server.baseURL }

    func start() async throws {
        let router = Router()
        let name = self.name
        router.get("healthz") { _, _ in "ok" }
        router.get("slow") { _, _ -> String in
            try await Task.sleep(for: .seconds(3))
            return "late"
        }
        for method in [HTTPRequest.Method.get, .post, .delete, .head] {
            router.on("**", method: method) { [self] request, context in
                if request.uri.path.hasSuffix("/pause") { pausesArrived.add(1, ordering: .relaxed) }
                return try await Self.echo(name, request, context)
            }
        }
        try await server.start(router, label: name)
    }

    /// What reached it, as JSON; a path ending in `/pause` answers 600 ms late, one ending in
    /// `/streamed` answers `one two three` in three parts, its length unsaid, one ending in `/refused`
    /// answers `413` before reading any of the body, and one ending in `/refused-at-length` the same,
    /// after a pause, with a body of `refusalAtLength` bytes, streamed, its length unsaid.
    static func echo(_ name: String, _ request: Request, _ context: BasicRequestContext) async throws -> Response {
        if request.uri.path.hasSuffix("/pause") { try await Task.sleep(for: .milliseconds(600)) }
        if request.uri.path.hasSuffix("/refused") { return Response(status: .contentTooLarge, headers: [.contentLength: "0"]) }
        if request.uri.path.hasSuffix("/refused-at-length") {
            // After the body sent meanwhile has filled the buffers on its way.
            try await Task.sleep(for: .milliseconds(500))
            return Response(
                status: .contentTooLarge, headers: [.contentType: "text/plain"],
                body: ResponseBody { writer in
                    let part = ByteBuffer(repeating: UInt8(ascii: "x"), count: 64 << 10)
                    for _ in 0..<(refusalAtLength / part.readableBytes) { try await writer.write(part) }
                    try await writer.finish(nil)
                })
        }
        if request.uri.path.hasSuffix("/streamed") {
            return Response(
                status: .ok, headers: [.contentType: "text/plain"],
                body: ResponseBody { writer in
                    for part in ["one ", "two ", "three"] { try await writer.write(ByteBuffer(string: part)) }
                    try await writer.finish(nil)
                })
        }
        let body = try await request.body.collect(upTo: 64 << 20)
        var headers: [String: String] = [:]
        for field in request.headers { headers[field.name.canonicalName] = field.value }
        let echo = Echo(service: name, method: request.method.rawValue, path: request.uri.description, headers: headers, bodyBytes: body.readableBytes)
        // A path with `/kept/` keeps the connection open for the next exchange; others end it.
        // A path with `/named-length/` also names its Content-Length there, as no server should.
        var connection = request.uri.path.contains("/kept/") ? "x-internal" : "close, x-internal"
        if request.uri.path.contains("/named-length/") { connection += ", content-length" }
        return Response(
            status: .ok,
            headers: [
                .contentType: "application/json", .connection: connection, HTTPField.Name("X-Internal")!: "secret", HTTPField.Name("X-Upstream")!: name,
                HTTPField.Name("SERVER")!: "echo", HTTPField.Name("x-REQUEST-id")!: "upstream-\(name)",
            ],
            body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(echo))))
    }

    func stop() { server.stop() }
}

@Suite struct GatewayTests {
    static func withGateway(
        timeout: Duration = .seconds(5), clientTimeout: Duration = .seconds(60), downService: String? = nil, upstreamOverrides: [String: String] = [:], trustedProxies: TrustedProxies = .none,
        adminPort: Int = 0, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
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
        let config = GatewayConfig(
            listener: .init(host: "127.0.0.1", port: 0), admin: .init(host: "127.0.0.1", port: adminPort), logLevel: .warning, upstreams: upstreams,
            upstreamTimeout: timeout, connectTimeout: .seconds(1), trustedProxies: trustedProxies, clientTimeout: clientTimeout,
            bodyLimits: Self.roomyLimits, rateLimits: Self.noRateLimits)
        try await buildApplication(config).test(.live) { client in try await body(client) }
    }

    /// These tests are about carrying bodies, large ones included; `EdgePolicyTests` has the limits.
    static let roomyLimits = BodyLimits(limits: ["/": 64 << 20])
    /// Nor about rate limits: `EdgeRateLimitTests` has them.
    static let noRateLimits = RateLimitTable(rules: [])

    /// A gateway that sends every service's routes to one upstream.
    static func config(everyServiceAt url: String, port: Int = 0, timeout: Duration) -> GatewayConfig {
        let upstreams = Dictionary(uniqueKeysWithValues: GatewayConfig.services.keys.map { ($0, url) })
        return GatewayConfig(
            listener: .init(host: "127.0.0.1", port: port), admin: .init(host: "127.0.0.1", port: 0), logLevel: .warning, upstreams: upstreams, upstreamTimeout: timeout, connectTimeout: .seconds(1),
            bodyLimits: roomyLimits, rateLimits: noRateLimits)
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
            // The upstream's own Server and X-Request-ID, in whatever case, give way to the gateway's.
            #expect(given.headers[values: .server] == ["gateway"] && given.headers[values: .requestID] == ["trace-me"])
            // A client's own X-Forwarded-For is not trusted: the gateway is the edge.
            #expect(echo.headers["x-forwarded-for"] == "127.0.0.1")

            let made = try await client.execute(
                uri: "/v1/auth/me", method: .get, headers: [.connection: "keep-alive, x-hop", HTTPField.Name("X-Hop")!: "1", HTTPField.Name("Keep-Alive")!: "timeout=5"])
            let madeEcho = try Self.echo(made)
            let id = try #require(made.headers[.requestID])
            #expect(UUID(uuidString: id) != nil)
            #expect(madeEcho.headers["x-request-id"] == id)
            // Connection-level headers never reach the upstream (this client does not send the headers
            // its `Connection` names: `pipelinedRequestsAreAnsweredInOrder` checks those).
            #expect(madeEcho.headers["keep-alive"] == nil && madeEcho.headers["connection"] == nil)
            #expect(madeEcho.headers["x-forwarded-host"] != nil && madeEcho.headers["host"] != madeEcho.headers["x-forwarded-host"])
            // Nor do those only the gateway sets, or a proxy's credentials, in whatever case the client writes them.
            let claimed = try Self.echo(
                try await client.execute(
                    uri: "/v1/auth/me", method: .get,
                    headers: [
                        HTTPField.Name("x-REAL-ip")!: "6.6.6.6", HTTPField.Name("X-Forwarded-Host")!: "evil.example",
                        HTTPField.Name("Proxy-Authorization")!: "Basic eDp5", HTTPField.Name("X-Kept")!: "yes",
                    ]))
            #expect(claimed.headers["x-real-ip"] == nil && claimed.headers["proxy-authorization"] == nil)
            #expect(claimed.headers["x-forwarded-host"] != "evil.example" && claimed.headers["x-kept"] == "yes")
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
            // A load balancer that adds a header line of its own rather than appending to the client's.
            let port = try #require(client.port)
            let lines = try await RawHTTP.exchange(port: port, "GET /v1/auth/me HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: 198.51.100.4\r\nX-Forwarded-For: 203.0.113.9\r\nConnection: close\r\n\r\n")
            #expect(try lines.first.map { try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: $0.body)).headers["x-forwarded-for"] } == "203.0.113.9")
        }
    }

    /// `/readyz` and `/metrics` are served on the internal listener only, which answers for this
    /// process alone; the public port has `/healthz` and answers the others as routes that do not exist.
    @Test func readinessAndMetricsAreOnTheInternalListenerOnly() async throws {
        let adminPort = try RedisServer.freePort()
        try await Self.withGateway(adminPort: adminPort) { client in
            for path in ["/readyz", "/metrics"] {
                let outside = try await client.execute(uri: path, method: .get)
                #expect(outside.status == .notFound && outside.headers[.contentType] == Problem.mediaType, "\(path)")
                #expect(!String(buffer: outside.body).contains("http_requests_total"))
            }
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            let metrics = try await ConcurrentClient.send(port: adminPort, "GET", "/metrics")
            #expect(metrics.status == 200 && String(buffer: metrics.body).contains("http_requests_total"))
            #expect(try await ConcurrentClient.send(port: adminPort, "GET", "/healthz").status == 200)
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
            // The gateway's own response carries what its proxied responses do.
            #expect(down.headers[.retryAfter] == "1" && down.headers[.server] == "gateway" && down.headers[.requestID] == "down-1")
            #expect(down.headers[.contentType] == Problem.mediaType)
        }
    }

    @Test func aSlowUpstreamIs504() async throws {
        let slow = EchoUpstream(name: "slow")
        try await slow.start()
        defer { slow.stop() }
        // The echo upstream's /slow sleeps 3 s; a table routing /slow to it makes the gateway wait.
        // The deadline covers the pool's first connection too (its connect timeout is what is left
        // of it, up to 1 s): a shorter one could run out while connecting on a loaded machine, and
        // that is 503, not 504.
        let config = Self.config(everyServiceAt: slow.baseURL, timeout: .milliseconds(1_500))
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
        let adminPort = try RedisServer.freePort()
        try await Self.withGateway(adminPort: adminPort) { client in
            let response = try await ConcurrentClient.send(port: adminPort, "GET", "/readyz")
            #expect(response.status == 503)
            let status = try JSONDecoder().decode(GatewayHealthRoutes.Status.self, from: Data(buffer: response.body))
            #expect(status.upstreams["auth"] == "ok" && status.upstreams["social"] == "ok")
            #expect(status.upstreams["nutrition"] == "unreachable")
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            _ = try await client.execute(uri: "/v1/auth/me", method: .get)
            let metrics = String(buffer: try await ConcurrentClient.send(port: adminPort, "GET", "/metrics").body)
            #expect(metrics.contains("http_requests_total"))
            // Proxied requests are counted per upstream, not as "unmatched".
            #expect(metrics.contains(#"route="proxy:auth""#), "\(metrics)")
        }
    }

    /// A client that pipelines: responses come back in the order of the requests, proxied or the
    /// gateway's own (its routes, a 404), bodies read whole or streamed, and `Connection: close` on
    /// the last ends the connection after it (as HTTP/1.0's default does).
    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        try await Self.withGateway { client in
            let port = try #require(client.port)
            let large = String(repeating: "x", count: 300_000)
            let requests = [
                "GET /v1/auth/first HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Kept: 2\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n",
                "POST /v1/profiles/second?x=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nhello",
                "GET /v1/nowhere HTTP/1.1\r\nHost: gw\r\n\r\n",
                "POST /v1/auth/large HTTP/1.1\r\nHost: gw\r\nContent-Length: \(large.utf8.count)\r\n\r\n\(large)",
                "DELETE /v1/profiles/last HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
            ]
            let answers = try await RawHTTP.exchange(port: port, requests.joined())
            #expect(answers.count == 6, "\(answers.map(\.status))")
            guard answers.count == 6 else { return }
            #expect(answers.map(\.status) == [200, 200, 200, 404, 200, 200])
            let first = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: answers[0].body))
            #expect(first.service == "auth" && first.path == "/v1/auth/first" && first.headers["x-forwarded-host"] == "gw")
            // Headers the client's `Connection` names stay at the gateway; the others go on.
            #expect(first.headers["x-hop"] == nil && first.headers["connection"] == nil && first.headers["x-kept"] == "2")
            #expect(String(buffer: answers[1].body).contains("ok"))
            let second = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: answers[2].body))
            #expect(second.service == "social" && second.path == "/v1/profiles/second?x=1" && second.method == "POST" && second.bodyBytes == 5)
            #expect(answers[3].headers["content-type"] == Problem.mediaType)
            let largeEcho = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: answers[4].body))
            #expect(largeEcho.path == "/v1/auth/large" && largeEcho.bodyBytes == 300_000)
            let last = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: answers[5].body))
            #expect(last.method == "DELETE" && last.path == "/v1/profiles/last")
            #expect(answers[5].headers["connection"] == "close")
            // Every response carries its own request id; the upstream's hop-by-hop headers stay behind.
            #expect(Set(answers.compactMap { $0.headers["x-request-id"] }).count == 6)
            #expect(answers[0].headers["x-internal"] == nil && answers[0].headers["x-upstream"] == "auth")

            // An HTTP/1.0 client that does not ask to keep the connection gets its response, then the
            // end: at once, not when the client timeout (a minute here) cuts it off.
            let old = try await withTimeout(.seconds(10), what: "HTTP/1.0 close") {
                try await RawHTTP.exchange(port: port, "GET /v1/auth/old HTTP/1.0\r\nHost: gw\r\n\r\n")
            }
            #expect(old.map(\.status) == [200])
            #expect(old.first?.headers["connection"] == "close")

            // A response of unknown length to HTTP/1.0, which knows no chunks: sent as it comes, and
            // the connection's end is the body's, whatever the client asked of the connection.
            let streamed = try await withTimeout(.seconds(10), what: "HTTP/1.0 streamed") {
                try await RawHTTP.untilClosed(port: port, "GET /v1/auth/kept/streamed HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\n\r\n")
            }
            let (head, body) = try #require(streamed.range(of: "\r\n\r\n").map { (streamed[..<$0.lowerBound].lowercased(), streamed[$0.upperBound...]) }, "\(streamed)")
            #expect(head.hasPrefix("http/1.0 200") && head.contains("connection: close") && !head.contains("transfer-encoding"), "\(head)")
            #expect(body == "one two three", "\(streamed)")
            // A request read ahead of it is not answered inside that body.
            let readAhead = try await withTimeout(.seconds(10), what: "HTTP/1.0 streamed, then another request") {
                try await RawHTTP.untilClosed(
                    port: port, "GET /v1/auth/kept/streamed HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\n\r\nGET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
            }
            #expect(readAhead.hasSuffix("\r\n\r\none two three"), "\(readAhead)")
            // The same to HTTP/1.1 comes in chunks, and the connection stays.
            let chunked = try await RawHTTP.exchange(port: port, "GET /v1/auth/kept/streamed HTTP/1.1\r\nHost: gw\r\n\r\nGET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n", untilAnswers: 2)
            #expect(chunked.map(\.status) == [200, 200] && chunked.first?.headers["transfer-encoding"] == "chunked")
            #expect(chunked.first.map { String(buffer: $0.body) } == "one two three")

            // A client that closes its side after its requests still gets every response.
            let halfClosed = try await RawHTTP.exchange(port: port, "GET /v1/auth/pause HTTP/1.1\r\nHost: gw\r\n\r\nGET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n", halfClose: true)
            #expect(halfClosed.map(\.status) == [200, 200])
        }
    }

    /// On one connection, each response is framed for its own request, however they mix: a proxied
    /// HEAD, the router's answers, an upstream answer whose `Connection` header names its own
    /// Content-Length, a HEAD to the router after a proxied GET, and the gateway's own refusal of a
    /// HEAD (a rate limit), which has no body either.
    @Test func eachAnswerIsFramedForItsOwnRequest() async throws {
        try await Self.withGateway { client in
            let port = try #require(client.port)
            let requests = [
                "HEAD /v1/auth/kept/a HTTP/1.1\r\nHost: gw\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n",
                "GET /v1/auth/kept/named-length/b HTTP/1.1\r\nHost: gw\r\n\r\n",
                "HEAD /healthz HTTP/1.1\r\nHost: gw\r\n\r\n",
                "GET /v1/auth/kept/c HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
            ]
            let answers = try await RawHTTP.exchange(port: port, requests.joined(), bodiless: [0, 3])
            // The gateway's own routes answer GET only: its HEAD is a 405, without a body.
            #expect(answers.map(\.status) == [200, 200, 200, 405, 200], "\(answers.map(\.status))")
            guard answers.count == 5 else { return }
            #expect(answers[0].body.readableBytes == 0 && answers[3].body.readableBytes == 0)
            #expect(String(buffer: answers[1].body).contains("ok"))
            let named = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: answers[2].body))
            #expect(named.path == "/v1/auth/kept/named-length/b")
            let last = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: answers[4].body))
            #expect(last.path == "/v1/auth/kept/c")
        }
        @Sendable func oneRequestAWindow(_ config: inout GatewayConfig) {
            config.rateLimits = RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 1, window: EdgeRateLimitTests.aWindowWithTimeLeft())])
        }
        try await EdgePolicyTests.withGateway(configure: oneRequestAWindow) { client in
            let port = try #require(client.port)
            let answers = try await RawHTTP.exchange(
                port: port,
                "HEAD /v1/auth/kept/a HTTP/1.1\r\nHost: gw\r\n\r\nHEAD /v1/auth/kept/b HTTP/1.1\r\nHost: gw\r\n\r\n"
                    + "GET /v1/auth/kept/c HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n", bodiless: [0, 1])
            #expect(answers.map(\.status) == [200, 429, 429])
            guard answers.count == 3 else { return }
            #expect(answers[1].body.readableBytes == 0)
            #expect(try JSONDecoder.api.decode(Problem.self, from: Data(buffer: answers[2].body)).code == "rate_limited")
        }
    }

    /// Request smuggling: whatever a client says of framing (a `Connection` header naming
    /// `Content-Length`, two lengths, a length and chunks), the upstream gets a body framed by the
    /// gateway or nothing, so the bytes of one client's body are never read as a request of their
    /// own on a pooled upstream connection, completed by the next client's headers.
    @Test func aClientCannotSmuggleARequestToTheUpstream() async throws {
        try await Self.withGateway { client in
            let port = try #require(client.port)
            // A smuggled request left open, for the next request on the connection to complete.
            let smuggled = "GET /v1/auth/smuggled HTTP/1.1\r\nHost: gw\r\nX-Pad: "
            for method in ["GET", "DELETE", "POST"] {
                for path in ["/v1/auth/kept/carrier", "/v1/profiles/kept/carrier"] {
                    let attack = "\(method) \(path) HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive, content-length\r\nContent-Length: \(smuggled.utf8.count)\r\n\r\n\(smuggled)"
                    let answers = try await RawHTTP.exchange(port: port, attack, untilAnswers: 1)
                    let echo = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: try #require(answers.first).body))
                    #expect(echo.method == method && echo.path == path && echo.bodyBytes == smuggled.utf8.count, "\(method) \(path): \(echo)")
                    // The next clients' requests, on the same pooled upstream connections, are their own.
                    for _ in 0..<3 {
                        let victim = try await client.execute(uri: path.replacingOccurrences(of: "kept/carrier", with: "victim"), method: .get, headers: [.authorization: "Bearer victim"])
                        let seen = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: victim.body))
                        #expect(seen.path.hasSuffix("/victim") && seen.method == "GET", "\(method) \(path): \(seen)")
                    }
                }
            }
            // Two lengths, or a length and chunks, or a head that is not HTTP: refused at the edge, never
            // forwarded, as a problem with its request id, and the connection ends.
            for framing in ["Content-Length: 5\r\nContent-Length: 6", "Content-Length: 5\r\nTransfer-Encoding: chunked", "Bad Header"] {
                let answers = try await RawHTTP.exchange(port: port, "POST /v1/auth/twice HTTP/1.1\r\nHost: gw\r\n\(framing)\r\n\r\n0\r\n\r\n")
                #expect(answers.map(\.status) == [400], "\(framing)")
                guard let answer = answers.first else { continue }
                let problem = try JSONDecoder().decode(Problem.self, from: Data(buffer: answer.body))
                #expect(answer.headers["content-type"] == "application/problem+json" && problem.code == "malformed_request", "\(framing): \(answer.headers)")
                #expect(answer.headers["x-request-id"] != nil && answer.headers["x-request-id"] == problem.requestID && answer.headers["connection"] == "close")
            }
            // What NIO's parser lets through and the gateway cannot pass on as it came: a length no
            // length can be here (the echo would get no body), a second host (it would become the
            // forwarded host), a coding besides chunks (stripped, the service would read it as the
            // body). Refused at the edge, never forwarded, and the connection ends.
            let passedByTheParser = [
                ("Content-Length: 9223372036854775808", 400, "malformed_request"), ("Content-Length: 5\r\nHost: evil.example", 400, "malformed_request"),
                ("Transfer-Encoding: gzip, chunked", 501, "transfer_coding_not_supported"),
            ]
            for (framing, status, code) in passedByTheParser {
                let answers = try await RawHTTP.exchange(port: port, "POST /v1/auth/framed HTTP/1.1\r\nHost: gw\r\n\(framing)\r\n\r\n0\r\n\r\n", timeout: .seconds(10))
                #expect(answers.map(\.status) == [status], "\(framing)")
                guard let answer = answers.first else { continue }
                let problem = try JSONDecoder().decode(Problem.self, from: Data(buffer: answer.body))
                #expect(answer.headers["content-type"] == "application/problem+json" && problem.code == code, "\(framing): \(answer.headers)")
                #expect(answer.headers["connection"] == "close", "\(framing): \(answer.headers)")
            }
            // A request to switch protocols: NIO's parser reads nothing after it, so the connection ends
            // with its answer rather than hold what the client sends next, unread (here a request).
            for switching in ["GET /v1/auth/switch HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive, Upgrade\r\nUpgrade: x\r\n\r\n", "CONNECT gw:443 HTTP/1.1\r\nHost: gw:443\r\n\r\n"] {
                let started = ContinuousClock.now
                let answers = try await RawHTTP.exchange(port: port, switching + "GET /v1/auth/next HTTP/1.1\r\nHost: gw\r\n\r\n", timeout: .seconds(10))
                #expect(answers.count == 1 && answers.first?.headers["connection"] == "close", "\(switching): \(answers.map { ($0.status, $0.headers) })")
                #expect(ContinuousClock.now - started < .seconds(5), "the connection ended with the answer")
            }
        }
    }

    /// A client that keeps the gateway waiting is cut off: a head sent a byte at a time or not
    /// finished, a body paused halfway, a kept-alive connection with no next request. A client the
    /// gateway keeps waiting (a slow upstream) is not.
    @Test func aClientThatKeepsTheGatewayWaitingIsCutOff() async throws {
        try await Self.withGateway(clientTimeout: .milliseconds(400)) { client in
            let port = try #require(client.port)
            let cases = [
                ("an unfinished head", "GET /v1/auth/me HTTP/1.1\r\nHost: gw\r\nX-Slow: ", 0),
                ("a body paused halfway", "POST /v1/auth/me HTTP/1.1\r\nHost: gw\r\nContent-Length: 10\r\n\r\nhalf", 0),
                ("a kept-alive connection left idle", "GET /v1/auth/kept/idle HTTP/1.1\r\nHost: gw\r\n\r\n", 1),
                // Chunked: the router's path, which streams the body on.
                ("a chunked body paused", "POST /v1/auth/me HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", 0),
                ("a chunked body to no route, paused", "POST /v1/nowhere HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", -1),
            ]
            for (name, text, answered) in cases {
                let started = ContinuousClock.now
                // Bounded here: the exchange itself waits until the server closes.
                let answers = try await withTimeout(.seconds(5), what: name) { try await RawHTTP.exchange(port: port, text) }
                let took = ContinuousClock.now - started
                // -1: the router may answer (404) before the body is in; the connection ends all the same.
                #expect(answered < 0 ? answers.count <= 1 : answers.count == answered, "\(name): \(answers.map(\.status))")
                #expect(took >= .milliseconds(300) && took < .seconds(3), "\(name): closed after \(took)")
            }
            // Waiting 600 ms for the upstream (longer than the client's allowance): answered.
            let patient = try await RawHTTP.exchange(port: port, "GET /v1/auth/kept/pause HTTP/1.1\r\nHost: gw\r\n\r\n", untilAnswers: 1, timeout: .seconds(10))
            #expect(patient.map(\.status) == [200])
        }
    }

    /// A body must keep coming at `CLIENT_BODY_MIN_RATE`: one trickling in a byte at a time, each
    /// byte well within the client timeout of the one before, is cut about that timeout after it
    /// began; one coming faster than the rate, longer in all than the timeout, is carried.
    @Test func aBodyTricklingInIsCutOffAndOneKeepingTheRateIsNot() async throws {
        // A timeout long enough that a stalled sender or event loop (a loaded machine) does not cut
        // the steady body, which goes on longer than it.
        try await Self.withGateway(clientTimeout: .seconds(2)) { client in
            let port = try #require(client.port)
            /// Sends the head, then `parts` of `size` bytes `every` apart; returns how long it went on,
            /// how many parts went, and what came back.
            @Sendable func post(parts: Int, size: Int, every: Duration) async throws -> (took: Duration, sent: Int, response: String) {
                try await LoopbackSocket.blocking {
                    let fd = try LoopbackSocket.connect(port: port)
                    defer { close(fd) }
                    let head = Array("POST /v1/auth/me HTTP/1.1\r\nHost: gw\r\nContent-Length: \(parts * size)\r\n\r\n".utf8)
                    guard LoopbackSocket.send(fd, head) == head.count else { throw LoopbackSocket.Failure(call: "send") }
                    let started = ContinuousClock.now
                    let part = [UInt8](repeating: 0x61, count: size)
                    var sent = 0
                    while sent < parts, LoopbackSocket.send(fd, part) == size {
                        sent += 1
                        if sent < parts { usleep(UInt32(every / .microseconds(1))) }
                    }
                    let took = ContinuousClock.now - started
                    var response: [UInt8] = []
                    var buffer = [UInt8](repeating: 0, count: 65_536)
                    while true {
                        let read = LoopbackSocket.receive(fd, into: &buffer)
                        if read <= 0 { break }
                        response += buffer[0..<read]
                        if String(decoding: response, as: UTF8.self).contains("\"path\"") { break }
                    }
                    return (took, sent, String(decoding: response, as: UTF8.self))
                }
            }
            let trickled = try await post(parts: 200, size: 1, every: .milliseconds(50))
            #expect(trickled.sent < 200 && trickled.took < .seconds(6), "\(trickled.sent) bytes over \(trickled.took)")
            #expect(!trickled.response.contains("200 OK"))
            let steady = try await post(parts: 30, size: 512, every: .milliseconds(100))
            #expect(steady.sent == 30 && steady.took > .milliseconds(2500))
            #expect(steady.response.hasPrefix("HTTP/1.1 200"), "\(steady.response.prefix(200))")
        }
    }

    /// An upstream that refuses an upload on its head: the client gets the refusal while its body is
    /// still coming, told the connection ends (`Connection: close`), and it ends, instead of the
    /// gateway reading the rest of the body only to throw it away. It ends in stages: the response,
    /// then the gateway's side (the client reads an end, not a reset that could erase the response),
    /// while what the client still sends is taken and dropped, far more than the kernel's buffers
    /// hold, whether or not the request said `Connection: close` (after which Hummingbird reads no
    /// more of its own).
    @Test(arguments: ["", "Connection: close\r\n"])
    func anUploadRefusedOnItsHeadEndsTheConnection(header: String) async throws {
        try await Self.withGateway { client in
            try await Self.expectUploadEndsInStages(port: try #require(client.port), header: header, status: 413)
        }
    }

    /// A client that goes quiet while its connection ends in stages is let go once
    /// `lingerIdleTime` passes without a byte from it, not held for the whole `lingerTime`. Each probe
    /// is a byte, sent after more than the idle time: dropped while the gateway lingers (and waiting
    /// on), answered with a reset once it has let go.
    @Test func aQuietClientIsLetGoAfterTheLingersIdleTime() async throws {
        try await Self.withGateway { client in
            let port = try #require(client.port)
            let idle = Duration.nanoseconds(ClientConnectionHandler.lingerIdleTime.nanoseconds)
            let total = Duration.nanoseconds(ClientConnectionHandler.lingerTime.nanoseconds)
            let (ended, letGoAfter) = try await LoopbackSocket.blocking { () -> (Bool, Duration?) in
                let upload = try Self.refusedUpload(port: port)
                defer { close(upload.fd) }
                let clock = ContinuousClock()
                let start = clock.now
                while clock.now - start + idle < total - .seconds(2) {
                    usleep(UInt32((idle + .milliseconds(1_500)) / .microseconds(1)))
                    _ = LoopbackSocket.send(upload.fd, [0x61])
                    usleep(300_000)
                    var error: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    getsockopt(upload.fd, SOL_SOCKET, SO_ERROR, &error, &length)
                    if error != 0 || LoopbackSocket.send(upload.fd, [0x61]) != 1 { return (upload.ended, clock.now - start) }
                }
                return (upload.ended, nil)
            }
            #expect(ended, "the gateway's side did not end with its response")
            let after = try #require(letGoAfter, "the quiet client was held for the whole linger")
            #expect(after > idle)
        }
    }

    /// A client still sending while its connection ends in stages keeps it past `lingerIdleTime`
    /// (each read moves the idle timer on); a graceful shutdown then lets it go within
    /// `lingerIdleTime` of its start, not at the end of the whole `lingerTime`, and the process stops.
    @Test func aGracefulShutdownCutsALingerShort() async throws {
        let idle = Duration.nanoseconds(ClientConnectionHandler.lingerIdleTime.nanoseconds)
        /// Whether a byte sent now is still taken: once the gateway has let go, the byte is answered
        /// with a reset, which the next send or the socket's error shows.
        @Sendable func taken(_ fd: Int32) -> Bool {
            guard LoopbackSocket.send(fd, [0x61]) == 1 else { return false }
            usleep(200_000)
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            return error == 0
        }
        try await Self.withStoppableGateway { port, group, _ in
            let upload = try await LoopbackSocket.blocking { try Self.refusedUpload(port: port) }
            defer { close(upload.fd) }
            #expect(upload.ended, "the gateway's side did not end with its response")
            let fd = upload.fd
            let kept = try await LoopbackSocket.blocking { () -> Bool in
                let start = ContinuousClock.now
                while ContinuousClock.now - start < idle + .seconds(3) {
                    guard taken(fd) else { return false }
                    usleep(800_000)
                }
                return true
            }
            #expect(kept, "a client still sending was let go at the idle time")
            let shutdown = ContinuousClock.now
            await group.triggerGracefulShutdown()
            let letGoAfter = try await LoopbackSocket.blocking { () -> Duration? in
                while ContinuousClock.now - shutdown < .seconds(15) {
                    if !taken(fd) { return ContinuousClock.now - shutdown }
                    usleep(800_000)
                }
                return nil
            }
            let after = try #require(letGoAfter, "the shutdown waited for the whole linger")
            #expect(after < idle + .seconds(5))
        }
    }

    /// A client that sent a first part of its upload and waits for an answer before sending more (one
    /// whose network stalled, or that reads before it writes on) gets the upstream's early refusal at
    /// once, not after its next part: the gateway stops reading the body when the answer comes.
    @Test func anEarlyAnswerReachesAClientWaitingToSendMore() async throws {
        try await Self.withGateway { client in
            try await Self.expectUploadEndsInStages(port: try #require(client.port), bodyBytes: 1_024, status: 413)
        }
    }

    /// An upstream that refuses an upload at length, streaming more than the buffers between it and
    /// the gateway hold, while the client keeps sending a body the upstream never reads: the gateway
    /// stops sending it on (a write the upstream would never take), and the refusal reaches the
    /// client whole, not cut off at the exchange's deadline.
    @Test func aLongEarlyAnswerIsNotHeldByTheBodyItRefused() async throws {
        try await Self.withGateway(timeout: .seconds(5)) { client in
            let port = try #require(client.port)
            let fd = try LoopbackSocket.connect(port: port)
            defer { close(fd) }
            let head = Array("POST /v1/auth/refused-at-length HTTP/1.1\r\nHost: gw\r\nContent-Length: \(64 << 20)\r\n\r\n".utf8)
            #expect(LoopbackSocket.send(fd, head) == head.count)
            // The body goes from a thread of its own until the gateway stops taking it (a send that
            // waits 3 s), while this one reads the response to the connection's end.
            let sending = Task {
                try await LoopbackSocket.blocking {
                    var timeout = timeval(tv_sec: 3, tv_usec: 0)
                    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                    let part = [UInt8](repeating: 0x61, count: 64 << 10)
                    var sent = 0
                    while sent < 64 << 20, LoopbackSocket.send(fd, part) == part.count { sent += part.count }
                    return sent
                }
            }
            let response = try await LoopbackSocket.blocking {
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let count = LoopbackSocket.receive(fd, into: &buffer)
                    if count <= 0 { break }
                    received += buffer[0..<count]
                }
                return received
            }
            _ = try await sending.value
            let text = String(decoding: response.prefix(300), as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 413") && text.lowercased().contains("connection: close"), "\(text)")
            // Chunked: the last chunk came, and every byte before it.
            #expect(String(decoding: response.suffix(5), as: UTF8.self) == "0\r\n\r\n", "the refusal was cut off after \(response.count) bytes")
            #expect(response.count > EchoUpstream.refusalAtLength)
        }
    }

    /// Sends an upload (`refusedUpload`) and expects `status` with `Connection: close`, the
    /// connection's end after it, and the rest of the body taken and dropped (`sendRestOfBody`).
    static func expectUploadEndsInStages(port: Int, path: String = "/v1/auth/refused", header: String = "", bodyBytes: Int = 2 << 20, status: Int) async throws {
        let (response, ended, sentAfter) = try await LoopbackSocket.blocking {
            let upload = try Self.refusedUpload(port: port, path: path, header: header, bodyBytes: bodyBytes)
            defer { close(upload.fd) }
            return (upload.response, upload.ended, Self.sendRestOfBody(upload.fd))
        }
        #expect(response.hasPrefix("HTTP/1.1 \(status)"), "\(response.prefix(300))")
        #expect(response.lowercased().contains("connection: close"), "\(response.prefix(300))")
        #expect(ended, "the connection did not end with its response (held open, or reset)")
        #expect(sentAfter == Self.restOfBody, "the rest of the body was not taken: \(sentAfter) bytes")
    }

    /// A request sent behind one whose answer ends the connection is never passed on (RFC 9112 §9.6:
    /// no further request is processed), whether the first was refused at the edge or asked to end
    /// the connection itself, and whether the one behind came whole or its body was cut off by the
    /// close (a chunked body without its last chunk, which must not reach a service as if whole).
    @Test func aRequestBehindOneThatEndsTheConnectionIsNotPassedOn() async throws {
        let auth = EchoUpstream(name: "auth")
        try await auth.start()
        defer { auth.stop() }
        try await buildApplication(Self.config(everyServiceAt: auth.baseURL, timeout: .seconds(5))).test(.live) { client in
            let port = try #require(client.port)
            let firsts = [
                "POST /v1/auth/framed HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
                "GET /v1/auth/me HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
            ]
            let behinds = [
                "DELETE /v1/auth/pause HTTP/1.1\r\nHost: gw\r\n\r\n",
                "POST /v1/auth/pause HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
            ]
            for first in firsts {
                for behind in behinds {
                    let answers = try await RawHTTP.exchange(port: port, first + behind, timeout: .seconds(10))
                    #expect(answers.count == 1 && answers.first?.headers["connection"] == "close", "\(first) \(behind): \(answers.map(\.status))")
                }
            }
            // A request of its own reaches the upstream (answered after the echo's pause, by when any
            // passed on above would have arrived), and is the only one that did.
            let own = try await RawHTTP.exchange(port: port, "DELETE /v1/auth/pause HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n", timeout: .seconds(10))
            #expect(own.map(\.status) == [200])
            #expect(auth.pausesArrived.load(ordering: .relaxed) == 1, "requests behind a closing answer were passed on")
        }
    }

    /// An upload to a service that is down: the `503` ends the connection too, instead of the gateway
    /// reading the rest of the body for nothing.
    @Test func anUploadToAServiceThatIsDownEndsTheConnection() async throws {
        try await Self.withGateway(downService: "auth") { client in
            try await Self.expectUploadEndsInStages(port: try #require(client.port), path: "/v1/auth/photo", status: 503)
        }
    }

    /// A graceful shutdown while a refused upload's connection ends in stages waits for that end
    /// instead of closing it at once, which would reset it under the client still sending.
    @Test func aShutdownLetsARefusedUploadEndInStages() async throws {
        let auth = EchoUpstream(name: "auth")
        try await auth.start()
        defer { auth.stop() }
        let port = try RedisServer.freePort()
        let group = ServiceGroup(
            services: [try buildApplication(Self.config(everyServiceAt: auth.baseURL, port: port, timeout: .seconds(5)))], gracefulShutdownSignals: [],
            logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await waitUntil(.seconds(20)) { await RedisServer.accepts(port: port) }
            let upload = try await LoopbackSocket.blocking { try Self.refusedUpload(port: port) }
            #expect(upload.response.hasPrefix("HTTP/1.1 413") && upload.ended, "\(upload.response.prefix(300))")
            await group.triggerGracefulShutdown()
            // The shutdown has begun (no new connections), and with it the close of idle ones.
            try await waitUntil(.seconds(10)) { await !RedisServer.accepts(port: port) }
            try await Task.sleep(for: .milliseconds(200))
            let sentAfter = try await LoopbackSocket.blocking { Self.sendRestOfBody(upload.fd) }
            close(upload.fd)
            #expect(sentAfter == Self.restOfBody, "the connection was cut under the client: \(sentAfter) bytes taken")
            try await tasks.waitForAll()
        }
    }

    /// What `refusedUpload` sends after the response: well past what the kernel's buffers hold.
    static let restOfBody = 40 << 20

    /// Sends the head of a 64 MiB upload to `path` (by default one the upstream refuses on its head:
    /// `413`, unread), with `header`, and the first `bodyBytes` of its body (2 MiB by default), then
    /// reads the response until the connection's end: the socket, what came, and whether it ended
    /// rather than broke.
    static func refusedUpload(port: Int, path: String = "/v1/auth/refused", header: String = "", bodyBytes: Int = 2 << 20) throws -> (fd: Int32, response: String, ended: Bool) {
        let fd = try LoopbackSocket.connect(port: port)
        // A small send buffer: what the gateway does not read blocks the sender soon.
        var sendBuffer: Int32 = 65_536
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sendBuffer, socklen_t(MemoryLayout<Int32>.size))
        let head = Array("POST \(path) HTTP/1.1\r\nHost: gw\r\n\(header)Content-Length: \(64 << 20)\r\n\r\n".utf8)
        guard LoopbackSocket.send(fd, head) == head.count else {
            close(fd)
            throw LoopbackSocket.Failure(call: "send")
        }
        var unsent = bodyBytes
        while unsent > 0 {
            let part = [UInt8](repeating: 0x61, count: min(unsent, 64 * 1024))
            guard LoopbackSocket.send(fd, part) == part.count else { break }
            unsent -= part.count
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        var ended = false
        while true {
            let count = LoopbackSocket.receive(fd, into: &buffer)
            ended = count == 0
            if count < 0 { return (fd, String(decoding: received, as: UTF8.self) + "[recv: \(String(cString: strerror(errno)))]", false) }
            if count == 0 { break }
            received += buffer[0..<count]
        }
        return (fd, String(decoding: received, as: UTF8.self), ended)
    }

    /// Sends `restOfBody` more bytes of the upload, each send given as long as the gateway promises
    /// to wait for the client's next bytes while it lingers: how many the gateway took. The whole may
    /// take longer than that (two cores shared with a build drain it slowly) and is still taken.
    static func sendRestOfBody(_ fd: Int32) -> Int {
        var timeout = timeval(tv_sec: Int(ClientConnectionHandler.lingerIdleTime.nanoseconds / 1_000_000_000), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let part = [UInt8](repeating: 0x61, count: 64 * 1024)
        var sent = 0
        while sent < restOfBody {
            let count = LoopbackSocket.send(fd, part)
            sent += count
            if count < part.count { break }
        }
        return sent
    }

    /// A shutdown that begins while a proxied request waits on its upstream lets it finish: the client
    /// gets the response, then the connection closes and the gateway stops.
    @Test func aShutdownLetsAProxiedRequestFinish() async throws {
        try await Self.withStoppableGateway { port, group, auth in
            let answer = Task { try await RawHTTP.exchange(port: port, "GET /v1/auth/pause HTTP/1.1\r\nHost: gw\r\n\r\n", untilAnswers: 1) }
            // Once the request is with the upstream (a request still unread when the shutdown begins
            // is refused with the connection, as any server's).
            try await waitUntil(.seconds(10)) { auth.pausesArrived.load(ordering: .relaxed) == 1 }
            await group.triggerGracefulShutdown()
            let answers = try await answer.value
            #expect(answers.map(\.status) == [200])
            #expect(try answers.first.map { try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(buffer: $0.body)).path } == "/v1/auth/pause")
        }
    }

    /// A gateway in a service group of its own, every upstream `auth`'s echo, that the test stops
    /// (`group.triggerGracefulShutdown()`): `body` runs once its port answers, and the group's end is
    /// awaited after it.
    static func withStoppableGateway(_ body: @escaping @Sendable (_ port: Int, _ group: ServiceGroup, _ auth: EchoUpstream) async throws -> Void) async throws {
        let auth = EchoUpstream(name: "auth")
        try await auth.start()
        defer { auth.stop() }
        let port = try RedisServer.freePort()
        let config = Self.config(everyServiceAt: auth.baseURL, port: port, timeout: .seconds(5))
        let group = ServiceGroup(services: [try buildApplication(config)], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await waitUntil(.seconds(20)) { await RedisServer.accepts(port: port) }
            try await body(port, group, auth)
            try await tasks.waitForAll()
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
            // The pages mails and share links open.
            "/verify-email": "auth", "/reset-password": "auth", "/invite": "invitations", "/shared/x": "nutrition",
        ]
        for (path, service) in expected { #expect(table.service(for: path) == service, "\(path)") }
        for path in ["/metrics", "/healthz", "/v1/events", "/openapi.json", "/v1", "/v1/authx", "/invites", "/sharedx", "/verify-emails"] {
            #expect(table.service(for: path) == nil, "\(path)")
        }
    }
}

/// A bare HTTP/1.1 client: writes the bytes it is given in one go (so requests can be pipelined) and
/// reads answers with a `Content-Length` until the server closes the connection, or until it has
/// `untilAnswers` of them.
enum RawHTTP {
    struct Answer {
        var status: Int
        var headers: [String: String]
        var body: ByteBuffer
    }

    /// `halfClose` closes the client's side once it has written, as a client that sends its last
    /// request and only reads afterwards.
    /// `bodiless` are the positions of the responses to HEAD requests, which have no body whatever
    /// their head says.
    static func exchange(
        port: Int, _ text: String, untilAnswers: Int? = nil, halfClose: Bool = false, bodiless: Set<Int> = [], timeout: Duration = .seconds(30)
    ) async throws -> [Answer] {
        let request = ByteBuffer(string: text)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.allowRemoteHalfClosure, value: true)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(WriteOnConnect(request))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            if halfClose { outbound.finish() }
            var received = ByteBuffer()
            var answers: [Answer] = []
            let deadline = ContinuousClock.now + timeout
            for try await var chunk in inbound {
                received.writeBuffer(&chunk)
                while let answer = parse(&received, bodiless: bodiless.contains(answers.count)) { answers.append(answer) }
                if let untilAnswers, answers.count >= untilAnswers { break }
                if ContinuousClock.now > deadline { break }
            }
            return answers
        }
    }

    /// Everything sent back for `text` until the other side closes the connection.
    static func untilClosed(port: Int, _ text: String) async throws -> String {
        let request = ByteBuffer(string: text)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(WriteOnConnect(request))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, _ in
            var received = ByteBuffer()
            for try await var chunk in inbound { received.writeBuffer(&chunk) }
            return String(buffer: received)
        }
    }

    /// Writes the request the moment the connection is up, on its event loop. Written after the
    /// connect's hop back to a task, it could reach a gateway with a short client timeout later
    /// than that timeout on a busy machine, and the gateway would rightly close the connection
    /// of a client that had sent nothing.
    final class WriteOnConnect: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = ByteBuffer
        typealias OutboundOut = ByteBuffer

        private var request: ByteBuffer?

        init(_ request: ByteBuffer) { self.request = request }

        func handlerAdded(context: ChannelHandlerContext) {
            if context.channel.isActive { send(context: context) }
        }

        func channelActive(context: ChannelHandlerContext) {
            send(context: context)
            context.fireChannelActive()
        }

        private func send(context: ChannelHandlerContext) {
            guard let request else { return }
            self.request = nil
            context.writeAndFlush(wrapOutboundOut(request), promise: nil)
        }
    }

    /// One whole response off the front of `buffer`, or nil if it has not all arrived.
    static func parse(_ buffer: inout ByteBuffer, bodiless: Bool = false) -> Answer? {
        let text = buffer.getString(at: buffer.readerIndex, length: min(buffer.readableBytes, 64 * 1024)) ?? ""
        guard let end = text.range(of: "\r\n\r\n") else { return nil }
        let headLength = text.utf8.distance(from: text.startIndex, to: end.upperBound)
        var lines = text[..<end.lowerBound].components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let status = statusLine.count > 1 ? Int(statusLine[1]) ?? 0 : 0
        if !bodiless, headers["transfer-encoding"] == "chunked" {
            // Chunks, each a hexadecimal size line and its bytes, until one of size 0.
            var at = buffer.readerIndex + headLength
            var body = ByteBuffer()
            while true {
                let rest = buffer.getString(at: at, length: buffer.writerIndex - at) ?? ""
                guard let lineEnd = rest.range(of: "\r\n") else { return nil }
                let line = rest[..<lineEnd.lowerBound]
                guard let size = Int(line.split(separator: ";").first ?? "", radix: 16) else { return nil }
                at += line.utf8.count + 2
                if size == 0 {
                    guard buffer.writerIndex - at >= 2 else { return nil }
                    at += 2
                    break
                }
                guard buffer.writerIndex - at >= size + 2, var chunk = buffer.getSlice(at: at, length: size) else { return nil }
                body.writeBuffer(&chunk)
                at += size + 2
            }
            buffer.moveReaderIndex(to: at)
            return Answer(status: status, headers: headers, body: body)
        }
        let length = bodiless ? 0 : Int(headers["content-length"] ?? "0") ?? 0
        guard buffer.readableBytes >= headLength + length else { return nil }
        buffer.moveReaderIndex(forwardBy: headLength)
        let body = buffer.readSlice(length: length) ?? ByteBuffer()
        return Answer(status: status, headers: headers, body: body)
    }
}
