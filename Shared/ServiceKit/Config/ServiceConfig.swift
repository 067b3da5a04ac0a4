import Foundation
import Logging
import NIOCore

/// The configuration every service reads the same way. Defaults serve `scripts/stack` on one machine.
public struct ServiceConfig: Sendable {
    public var name: String
    public var isProduction: Bool
    /// Where the service listens (`HTTP_HOST`, `HTTP_PORT`, `HTTP_REUSE_PORT`).
    public var listener: HTTPListenerOptions
    public var logLevel: Logger.Level
    public var database: DatabaseConfig
    public var redis: RedisConfiguration
    public var events: EventBusConfig
    public var tokens: TokenConfig
    /// Whose `X-Forwarded-For` names the client: by default the loopback and private networks, where
    /// the gateway reaches the services.
    public var trustedProxies: TrustedProxies
    /// The variables the configuration was read from: a service with settings of its own reads them
    /// from here (with an `EnvironmentReader`, so its problems are reported the same way).
    public var environment: [String: String]

    /// Reads the common variables; a service with more settings reads its own with the same reader.
    public init(name: String, defaultPort: Int, reading env: inout EnvironmentReader) {
        self.name = name
        self.environment = env.values
        self.isProduction = env.isProduction
        listener = HTTPListenerOptions(defaultPort: defaultPort, reading: &env)
        logLevel = Logger.Level(rawValue: env.oneOf("LOG_LEVEL", default: "info", allowed: Logger.Level.allCases.map(\.rawValue))) ?? .info
        database = DatabaseConfig(service: name, reading: &env)
        let redisURL = env.url("REDIS_URL", default: "redis://127.0.0.1:6379", schemes: ["redis"], requiredInProduction: true)
        redis = RedisConfiguration(
            host: redisURL?.host ?? "127.0.0.1", port: redisURL?.port ?? 6379, password: redisURL?.password,
            database: Int(redisURL?.path.dropFirst() ?? "") ?? 0,
            poolSize: env.int("REDIS_POOL_SIZE", default: 4, range: 1...64),
            commandTimeout: .milliseconds(Int64(env.int("REDIS_COMMAND_TIMEOUT_MS", default: 5_000, range: 10...600_000)))
        )
        events = EventBusConfig(service: name, reading: &env)
        tokens = TokenConfig(reading: &env)
        trustedProxies = env.trustedProxies("TRUSTED_PROXIES", default: .privateNetworks)
        ProcessTuning.readEventLoopThreads(&env)
    }

    /// Loads and validates, throwing one error that names every problem.
    public static func load(name: String, defaultPort: Int, environment: [String: String]) throws -> ServiceConfig {
        var env = EnvironmentReader(environment)
        let config = ServiceConfig(name: name, defaultPort: defaultPort, reading: &env)
        try env.finish()
        return config
    }
}

/// PostgreSQL: the service's own login role and schema.
public struct DatabaseConfig: Sendable {
    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String
    public var schema: String
    public var poolSize: Int
    /// Connections opened at start and kept open, never closed for being idle (at least one, no more
    /// than `poolSize`): the whole pool in the services (see `PostgresClient(database:)`).
    /// PostgresNIO gives each connection beyond these an idle timer, armed (three tasks and a sleep)
    /// every time the connection goes back to the pool and cancelled when it is leased again: an
    /// eighth of a profile read's CPU.
    public var minimumConnections: Int
    public var statementTimeout: Duration
    public var requireTLS: Bool
    /// How often `DatabaseWatch` checks that PostgreSQL answers.
    public var probeInterval: Duration = .seconds(1)

    /// `minimumConnections` defaults to one, the least a pool keeps (see `PostgresClient(database:)`),
    /// and not to the pool size: tests make many pools.
    public init(host: String, port: Int, user: String, password: String?, database: String, schema: String, poolSize: Int = 10, minimumConnections: Int = 1,
                statementTimeout: Duration = .seconds(10), requireTLS: Bool = false) {
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.schema = schema
        self.poolSize = poolSize
        self.minimumConnections = minimumConnections
        self.statementTimeout = statementTimeout
        self.requireTLS = requireTLS
    }

    init(service: String, reading env: inout EnvironmentReader) {
        let url = env.url("DATABASE_URL", default: "postgres://\(service):\(service)@127.0.0.1:5432/foodbackend", schemes: ["postgres", "postgresql"], requiredInProduction: true)
        let poolSize = env.int("DATABASE_POOL_SIZE", default: 10, range: 1...200)
        self.init(
            host: url?.host ?? "127.0.0.1",
            port: url?.port ?? 5432,
            user: url?.user ?? service,
            password: url?.password,
            database: url.map { String($0.path.dropFirst()) }.flatMap { $0.isEmpty ? nil : $0 } ?? "foodbackend",
            schema: env.string("DATABASE_SCHEMA", default: service),
            poolSize: poolSize,
            minimumConnections: poolSize,
            statementTimeout: env.milliseconds("DATABASE_STATEMENT_TIMEOUT_MS", default: 10_000, range: 100...3_600_000),
            requireTLS: url?.query["sslmode"] == "require"
        )
        probeInterval = env.milliseconds("DATABASE_PROBE_INTERVAL_MS", default: 1_000, range: 100...60_000)
        if !schema.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) {
            env.report("DATABASE_SCHEMA: must be letters, digits and _, got \"\(schema)\"")
        }
    }
}

/// The event bus: which stream, which group, how patient.
public struct EventBusConfig: Sendable {
    public var stream: String
    /// `MAXLEN ~` on every `XADD`; entries older than this many are trimmed even if a group has not read them.
    public var maxLength: Int
    /// Entries older than this are trimmed from the stream and this group's dead-letter stream (by
    /// the relay, `XTRIM … MINID`), however few there are: event payloads carry personal data (a
    /// deleted account's allergies in `profile.updated`), which must not stay in Redis for as long as
    /// `maxLength` alone would keep it on a quiet system.
    public var retention: Duration
    public var group: String
    public var consumerName: String
    /// How long an entry may sit unacknowledged with a consumer before another replica claims it.
    public var claimIdle: Duration
    /// Deliveries after which a failing event goes to the dead-letter stream.
    public var maxDeliveries: Int
    /// How often the relay looks at the outbox when no commit of this process rang it (rows written by another process).
    public var relayPollInterval: Duration
    public var readBlock: Duration

    public init(stream: String = "events", maxLength: Int = 1_000_000, retention: Duration = .seconds(7 * 86_400), group: String, consumerName: String,
                claimIdle: Duration = .seconds(30), maxDeliveries: Int = 5, relayPollInterval: Duration = .seconds(2),
                readBlock: Duration = .seconds(2)) {
        self.stream = stream
        self.maxLength = maxLength
        self.retention = retention
        self.group = group
        self.consumerName = consumerName
        self.claimIdle = claimIdle
        self.maxDeliveries = maxDeliveries
        self.relayPollInterval = relayPollInterval
        self.readBlock = readBlock
    }

    /// The dead-letter stream of this group.
    public var deadLetterStream: String { "\(stream):dead:\(group)" }

    init(service: String, reading env: inout EnvironmentReader) {
        let defaultConsumer = "\(service)-\(System.hostName)-\(System.processID)"
        self.init(
            stream: env.string("EVENTS_STREAM", default: "events"),
            maxLength: env.int("EVENTS_MAXLEN", default: 1_000_000, range: 1_000...1_000_000_000),
            retention: .seconds(3_600 * env.int("EVENTS_RETENTION_HOURS", default: 168, range: 1...87_600)),
            group: service,
            consumerName: env.string("EVENTS_CONSUMER_NAME", default: defaultConsumer),
            claimIdle: env.milliseconds("EVENTS_CLAIM_IDLE_MS", default: 30_000, range: 100...86_400_000),
            maxDeliveries: env.int("EVENTS_MAX_DELIVERIES", default: 5, range: 1...1_000),
            relayPollInterval: env.milliseconds("EVENTS_RELAY_POLL_MS", default: 2_000, range: 10...600_000),
            readBlock: env.milliseconds("EVENTS_READ_BLOCK_MS", default: 2_000, range: 10...60_000)
        )
    }
}

/// How incoming access tokens are checked.
public struct TokenConfig: Sendable {
    public var jwksURL: String
    public var issuer: String
    public var audience: String
    public var leeway: Duration
    /// Unknown `kid`s trigger a JWKS refresh at most this often.
    public var minRefreshInterval: Duration

    public init(jwksURL: String, issuer: String, audience: String, leeway: Duration = .seconds(30), minRefreshInterval: Duration = .seconds(5)) {
        self.jwksURL = jwksURL
        self.issuer = issuer
        self.audience = audience
        self.leeway = leeway
        self.minRefreshInterval = minRefreshInterval
    }

    init(reading env: inout EnvironmentReader) {
        let jwks = env.url("JWKS_URL", default: "http://127.0.0.1:8081/.well-known/jwks.json", schemes: ["http", "https"], requiredInProduction: true)
        self.init(
            jwksURL: env.values["JWKS_URL"].flatMap { jwks == nil ? nil : $0 } ?? "http://127.0.0.1:8081/.well-known/jwks.json",
            issuer: env.string("JWT_ISSUER", default: "http://127.0.0.1:8080", requiredInProduction: true),
            audience: env.string("JWT_AUDIENCE", default: "foodbackend"),
            leeway: env.milliseconds("JWT_LEEWAY_MS", default: 30_000, range: 0...300_000),
            minRefreshInterval: env.milliseconds("JWKS_MIN_REFRESH_MS", default: 5_000, range: 0...3_600_000)
        )
    }
}

/// Facts about this process used in names.
public enum System {
    public static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public static var processID: Int32 { getpid() }
}
