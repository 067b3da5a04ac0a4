import Foundation
import Logging
import ServiceKit

/// The gateway's configuration: where it listens and where each service lives.
struct GatewayConfig: Sendable {
    var listener: HTTPListenerOptions
    /// Where the gateway's readiness and metrics are served (`ADMIN_HTTP_HOST`, `ADMIN_HTTP_PORT`).
    var admin: HTTPListenerOptions
    var logLevel: Logger.Level
    /// Service name → base URL (`http://127.0.0.1:8081`).
    var upstreams: [String: String]
    var upstreamTimeout: Duration
    var connectTimeout: Duration
    /// Load balancers in front of the gateway whose `X-Forwarded-For` is believed; none by default
    /// (the gateway is the edge, and a client's own header is not passed on).
    var trustedProxies: TrustedProxies = .none
    /// How long a client may keep the gateway waiting (its next head, a body's next part, the
    /// reading of a response) before its connection is closed (`ClientConnectionHandler`).
    /// Above the idle timeout of a load balancer in front (60 s for many), so that the balancer, not
    /// the gateway, ends an idle connection: one closing under a request it just sent is its 502.
    var clientTimeout: Duration = .seconds(75)
    /// The slowest a request body may come, in bytes a second, once it has started: each part of a
    /// body moves its deadline on by the time its bytes earn at this rate, never past
    /// `clientTimeout` from now (`ClientConnectionHandler`).
    var clientBodyMinRate: Int = 1_024
    /// The apps that open the pages mails and share links point to (`AppLinks`).
    var appLinks = AppLinks()
    /// How long `GET /openapi.json` keeps a merge before it fetches the services' documents again
    /// (`MergedOpenAPIDocument`); also its `Cache-Control: max-age`.
    var openAPILifetime: Duration = .seconds(60)
    /// Redis (`REDIS_URL`), for the live event stream: its subscription, tickets and limits.
    var redis = RedisConfiguration()
    /// How `GET /v1/events` checks access tokens, as the services do (`JWT_ISSUER`, `JWT_AUDIENCE`);
    /// the keys come from `JWKS_URL`, by default auth's (`AUTH_URL`).
    var tokens = TokenConfig(jwksURL: "http://127.0.0.1:8081/.well-known/jwks.json", issuer: "http://127.0.0.1:8080", audience: "foodbackend")
    var liveEvents = LiveEventsConfig()
    /// Request body limits by path (`BODY_LIMITS`).
    var bodyLimits = BodyLimits.standard
    /// The request-body bytes held in memory at once (`BODY_BUFFER_BYTES`, `BodyBuffers`).
    var bodyBufferBytes = BodyBuffers.standardCapacity
    /// Web origins that may call the API from a browser (`CORS_ALLOWED_ORIGINS`).
    var cors = CORSPolicy()
    /// Requests per window by path prefix and caller (`RATE_LIMITS`).
    var rateLimits = RateLimitTable.standard
    /// Bearer tokens not seen before that the rate limits verify per client address and minute, in
    /// each process (`RATE_LIMIT_TOKEN_CHECKS`); beyond them a request counts by its address unverified.
    var tokenChecksPerAddress = EdgeRateLimiter.standardTokenChecksPerAddress

    /// Service name → default port: services.txt's, through the generated `ServiceRegistry`.
    static let services = Dictionary(uniqueKeysWithValues: ServiceRegistry.all.map { ($0.name, $0.port) })

    static func load(environment: [String: String]) throws -> GatewayConfig {
        var env = EnvironmentReader(environment)
        var upstreams: [String: String] = [:]
        for (service, port) in services.sorted(by: { $0.key < $1.key }) {
            let name = "\(service.uppercased())_URL"
            let url = env.url(name, default: "http://127.0.0.1:\(port)", schemes: ["http", "https"], requiredInProduction: true)
            if url != nil {
                var text = environment[name] ?? "http://127.0.0.1:\(port)"
                while text.hasSuffix("/") { text.removeLast() }
                upstreams[service] = text
            }
        }
        let listener = HTTPListenerOptions(defaultPort: 8080, reading: &env)
        let config = GatewayConfig(
            listener: listener,
            admin: HTTPListenerOptions.admin(publicPort: listener.port, reading: &env),
            logLevel: Logger.Level(rawValue: env.oneOf("LOG_LEVEL", default: "info", allowed: Logger.Level.allCases.map(\.rawValue))) ?? .info,
            upstreams: upstreams,
            upstreamTimeout: env.milliseconds("UPSTREAM_TIMEOUT_MS", default: 30_000, range: 10...600_000),
            connectTimeout: env.milliseconds("UPSTREAM_CONNECT_TIMEOUT_MS", default: 2_000, range: 10...60_000),
            trustedProxies: env.trustedProxies("TRUSTED_PROXIES", default: .none),
            clientTimeout: env.milliseconds("CLIENT_TIMEOUT_MS", default: 75_000, range: 100...3_600_000),
            clientBodyMinRate: env.int("CLIENT_BODY_MIN_RATE", default: 1_024, range: 1...1_000_000_000),
            appLinks: AppLinks(reading: &env),
            redis: Self.redis(reading: &env),
            tokens: Self.tokens(reading: &env, authURL: upstreams["auth"]),
            liveEvents: LiveEventsConfig(reading: &env),
            bodyLimits: BodyLimits(reading: &env),
            bodyBufferBytes: env.int("BODY_BUFFER_BYTES", default: BodyBuffers.standardCapacity, range: (1 << 20)...(1 << 40)),
            cors: CORSPolicy(reading: &env),
            rateLimits: RateLimitTable(reading: &env),
            tokenChecksPerAddress: env.int(
                "RATE_LIMIT_TOKEN_CHECKS", default: EdgeRateLimiter.standardTokenChecksPerAddress, range: 0...1_000_000)
        )
        if let largest = config.bodyLimits.limits.map(\.bytes).max(), config.bodyBufferBytes < largest {
            env.report("BODY_BUFFER_BYTES (\(config.bodyBufferBytes)) must be at least the largest of BODY_LIMITS (\(largest)): a chunked body that large could never be taken")
        }
        ProcessTuning.readEventLoopThreads(&env)
        try env.finish()
        return config
    }
}
