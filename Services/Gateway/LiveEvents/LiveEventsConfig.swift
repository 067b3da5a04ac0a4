import ServiceKit

/// The live event stream's settings (`GET /v1/events`).
struct LiveEventsConfig: Sendable {
    /// A comment line this often keeps proxies from closing an idle stream and shows a dead client
    /// (`SSE_HEARTBEAT_S`); a stream whose heartbeat stops for three of these no longer counts.
    var heartbeat: Duration = .seconds(15)
    /// Streams one user may have open across every gateway process (`SSE_MAX_PER_USER`).
    var maxPerUser = 5
    /// Streams one gateway process holds at most (`SSE_MAX_CONNECTIONS`).
    var maxConnections = 10_000
    /// How long a ticket from `POST /v1/events/ticket` may wait to be used.
    var ticketLifetime: Duration = .seconds(60)
    /// The `retry:` a stream starts with: how long a client waits before reconnecting.
    var reconnectDelay: Duration = .seconds(3)
    /// The services' event stream (`EVENTS_STREAM`, as they read it), where the endings the live
    /// subscription missed are read again (`EndingsCatchUp`).
    var stream = "events"
    /// The longest a starting gateway keeps its port closed for its first read of that stream.
    var firstReadWait: Duration = .seconds(5)

    init(heartbeat: Duration = .seconds(15), maxPerUser: Int = 5, maxConnections: Int = 10_000, stream: String = "events", firstReadWait: Duration = .seconds(5)) {
        self.heartbeat = heartbeat
        self.maxPerUser = maxPerUser
        self.maxConnections = maxConnections
        self.stream = stream
        self.firstReadWait = firstReadWait
    }

    init(reading env: inout EnvironmentReader) {
        self.init(
            heartbeat: .seconds(env.int("SSE_HEARTBEAT_S", default: 15, range: 1...300)),
            maxPerUser: env.int("SSE_MAX_PER_USER", default: 5, range: 1...1_000),
            maxConnections: env.int("SSE_MAX_CONNECTIONS", default: 10_000, range: 1...1_000_000),
            stream: env.string("EVENTS_STREAM", default: "events")
        )
    }
}

extension GatewayConfig {
    /// Redis, read as the services read it (`RedisConfiguration(reading:)`).
    static func redis(reading env: inout EnvironmentReader) -> RedisConfiguration {
        RedisConfiguration(reading: &env)
    }

    /// The token settings the services read (`TokenConfig`), except that `JWKS_URL` may be left out:
    /// the gateway knows auth's address (`AUTH_URL`), and its keys are there.
    static func tokens(reading env: inout EnvironmentReader, authURL: String?) -> TokenConfig {
        let fallback = (authURL ?? "http://127.0.0.1:8081") + "/.well-known/jwks.json"
        let jwks = env.url("JWKS_URL", default: fallback, schemes: ["http", "https"])
        return TokenConfig(
            jwksURL: jwks == nil ? fallback : env.values["JWKS_URL"] ?? fallback,
            issuer: env.string("JWT_ISSUER", default: "http://127.0.0.1:8080", requiredInProduction: true),
            audience: env.string("JWT_AUDIENCE", default: "foodbackend"),
            leeway: env.milliseconds("JWT_LEEWAY_MS", default: 30_000, range: 0...300_000),
            minRefreshInterval: env.milliseconds("JWKS_MIN_REFRESH_MS", default: 5_000, range: 0...3_600_000)
        )
    }
}
