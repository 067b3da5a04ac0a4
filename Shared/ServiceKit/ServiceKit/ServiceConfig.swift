import Foundation
import Logging
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens

/// The configuration every service reads the same way. Defaults serve `scripts/stack` on one machine.
public struct ServiceConfig: Sendable {
    public var name: String
    public var isProduction: Bool
    /// Where the service listens (`HTTP_HOST`, `HTTP_PORT`, `HTTP_REUSE_PORT`).
    public var listener: HTTPListenerOptions
    /// Where readiness and metrics are served, for this process alone (`ADMIN_HTTP_HOST`, `ADMIN_HTTP_PORT`).
    public var admin: HTTPListenerOptions
    public var logLevel: Logger.Level
    public var database: DatabaseConfig
    public var redis: RedisConfiguration
    public var events: EventBusConfig
    public var tokens: TokenConfig
    /// Whose `X-Forwarded-For` names the client: by default the loopback and private networks, where
    /// the gateway reaches the services.
    public var trustedProxies: TrustedProxies
    /// How many uploads (bodies to the service's larger-bodied routes, a photo's) one user may send
    /// this process at once (`UPLOADS_PER_USER`, 2): `UploadSlots`.
    public var uploadsPerUser: Int
    /// The variables the configuration was read from: a service with settings of its own reads them
    /// from here (with an `EnvironmentReader`, so its problems are reported the same way).
    public var environment: [String: String]

    /// Reads the common variables; a service with more settings reads its own with the same reader.
    public init(name: String, defaultPort: Int, reading env: inout EnvironmentReader) {
        self.name = name
        self.environment = env.values
        self.isProduction = env.isProduction
        listener = HTTPListenerOptions(defaultPort: defaultPort, reading: &env)
        admin = HTTPListenerOptions.admin(publicPort: listener.port, reading: &env)
        logLevel = Logger.Level(rawValue: env.oneOf("LOG_LEVEL", default: "info", allowed: Logger.Level.allCases.map(\.rawValue))) ?? .info
        database = DatabaseConfig(service: name, reading: &env)
        redis = RedisConfiguration(reading: &env)
        events = EventBusConfig(service: name, reading: &env)
        tokens = TokenConfig(reading: &env)
        trustedProxies = env.trustedProxies("TRUSTED_PROXIES", default: .privateNetworks)
        uploadsPerUser = env.int("UPLOADS_PER_USER", default: 2, range: 1...64)
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
