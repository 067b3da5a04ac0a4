import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import Models
import PostgresNIO
import ServiceLifecycle

/// What a service's routes and event handlers are built from: values, passed in, no globals.
public struct ServiceDependencies: Sendable {
    public let config: ServiceConfig
    public let postgres: PostgresClient
    public let redis: RedisClient
    public let outbox: EventOutbox
    public let tokens: TokenVerifier
    public let metrics: MetricsRegistry
    public let httpClient: HTTPClient
    public let logger: Logger
}

/// One service: its name, its migrations and, from its configuration, its own parts (routes, event
/// handlers, background services, commands). The kit builds the same process around every
/// definition, so the second service looks like the first.
public struct ServiceDefinition: Sendable {
    public var name: String
    public var defaultPort: Int
    public var migrations: @Sendable () throws -> [Migration]
    /// Reads the service's own settings (throwing `ConfigurationError` naming every problem) and
    /// returns its parts. Called once per process, before anything starts.
    public var setup: @Sendable (ServiceConfig) throws -> ServiceSetup

    public init(
        name: String, defaultPort: Int,
        migrations: @escaping @Sendable () throws -> [Migration],
        setup: @escaping @Sendable (ServiceConfig) throws -> ServiceSetup = { _ in ServiceSetup() }
    ) {
        self.name = name
        self.defaultPort = defaultPort
        self.migrations = migrations
        self.setup = setup
    }

    /// Reads the service's `Migrations/*.sql` from its resource bundle.
    public static func bundledMigrations(_ bundle: Bundle) throws -> [Migration] {
        guard let url = bundle.url(forResource: "Migrations", withExtension: nil) else { return [] }
        return try Migration.load(directory: url)
    }
}

/// A service's own parts, built from its configuration by `ServiceDefinition.setup`.
public struct ServiceSetup: Sendable {
    /// Where access-token keys come from; `nil` means the issuer's JWKS over HTTP (`JWKS_URL`).
    /// The issuer itself passes its own keys.
    public var tokenSource: (any JWKSSource)?
    /// Extra command-line verbs beside `serve`, `migrate` and `provision`.
    public var commands: [String: ServiceCommand]
    /// Adds the service's routes to the router and returns its event handlers and background work;
    /// called once, when the application is built.
    public var build: @Sendable (Router<ServiceRequestContext>, ServiceDependencies) throws -> ServiceComponents

    public init(
        tokenSource: (any JWKSSource)? = nil,
        commands: [String: ServiceCommand] = [:],
        build: @escaping @Sendable (Router<ServiceRequestContext>, ServiceDependencies) throws -> ServiceComponents = { _, _ in ServiceComponents() }
    ) {
        self.tokenSource = tokenSource
        self.commands = commands
        self.build = build
    }
}

/// What a running service has beside its routes.
public struct ServiceComponents: Sendable {
    public var handlers: EventHandlers
    /// Background work that runs with the server (a mail sender, say), started once migrations are
    /// done and stopped before the event bus and the pools.
    public var services: [any Service]

    public init(handlers: EventHandlers = EventHandlers(), services: [any Service] = []) {
        self.handlers = handlers
        self.services = services
    }
}

/// A command-line verb of a service (`auth create-admin …`): it runs after migrations, with the
/// service's database and outbox, and prints what it did.
public struct ServiceCommand: Sendable {
    public var usage: String
    public var run: @Sendable (_ arguments: [String], _ context: CommandContext) async throws -> Void

    public init(usage: String, run: @escaping @Sendable (_ arguments: [String], _ context: CommandContext) async throws -> Void) {
        self.usage = usage
        self.run = run
    }
}

public struct CommandContext: Sendable {
    public let config: ServiceConfig
    public let postgres: PostgresClient
    public let outbox: EventOutbox
    public let logger: Logger
}

/// Builds the application of one service: HTTP with the kit's middleware and health routes, the
/// PostgreSQL pool, migrations before the server accepts requests, the outbox relay and the event
/// consumer once migrations are done. Tests call this with test configuration; `main` calls it too.
public func buildServiceApplication(_ definition: ServiceDefinition, config: ServiceConfig) throws -> ServiceApplication<RouterResponder<ServiceRequestContext>> {
    let setup = try definition.setup(config)
    var logger = Logger(label: definition.name)
    logger.logLevel = config.logLevel
    let registry = MetricsRegistry()
    let postgres = PostgresClient(database: config.database, logger: logger)
    let redis = RedisClient(configuration: config.redis, logger: logger)
    var consumerRedisConfig = config.redis
    consumerRedisConfig.poolSize = 1
    let consumerRedis = RedisClient(configuration: consumerRedisConfig, logger: logger)
    let httpClient = HTTPClient(eventLoopGroupProvider: .singleton)
    let tokens = TokenVerifier(source: setup.tokenSource ?? HTTPJWKSSource(url: config.tokens.jwksURL, httpClient: httpClient), config: config.tokens, logger: logger)
    let dependencies = ServiceDependencies(
        config: config, postgres: postgres, redis: redis, outbox: EventOutbox(producer: definition.name),
        tokens: tokens, metrics: registry, httpClient: httpClient, logger: logger
    )
    let readiness = Readiness()
    let busMetrics = EventBusMetrics(registry: registry)
    let databaseWatch = try DatabaseWatch(database: config.database, interval: config.database.probeInterval, logger: logger)

    let router = Router(context: ServiceRequestContext.self)
    router.add(middleware: TelemetryMiddleware(metrics: HTTPMetrics(registry: registry), trustedProxies: config.trustedProxies))
    router.add(middleware: ProblemMiddleware())
    router.add(middleware: DatabaseGateMiddleware(watch: databaseWatch))
    HealthRoutes(postgres: postgres, redis: redis, readiness: readiness, metrics: registry).add(to: router)
    router.add(middleware: TokenMiddleware(verifier: tokens))
    let components = try setup.build(router, dependencies)

    let migrations = try EventBusSchema.migrations + definition.migrations()
    // The relay has a small pool of its own (its batches and its backlog gauge), so request traffic
    // that fills the main pool cannot hold events back.
    var relayDatabase = config.database
    relayDatabase.poolSize = 2
    let relayPostgres = PostgresClient(database: relayDatabase, logger: logger)
    let relay = OutboxRelay(client: relayPostgres, redis: redis, config: config.events, schema: config.database.schema, metrics: busMetrics, logger: logger)
    let consumer = EventConsumer(
        client: postgres, redis: consumerRedis, config: config.events, handlers: components.handlers,
        producer: definition.name, metrics: busMetrics, logger: logger
    )
    var app = ServiceApplication(
        router: router,
        listener: config.listener,
        serverName: definition.name,
        // Started in this order, stopped in reverse: the event bus stops before the pools it uses.
        services: [
            Closer { try? await httpClient.shutdown(); await redis.close(); await consumerRedis.close() },
            postgres,
            relayPostgres,
            databaseWatch,
            EventBus(readiness: readiness, relay: relay, consumer: consumer),
        ] + components.services.map { AfterMigrations(readiness: readiness, service: $0) } + [
            ShutdownNotice(logger: logger),
        ],
        logger: logger
    )
    let migrationLogger = logger
    app.beforeServerStarts {
        let logger = migrationLogger
        let applied = try await MigrationRunner(client: postgres, schema: config.database.schema, migrations: migrations, logger: logger).run()
        logger.info("migrations up to date", metadata: ["applied_now": "\(applied.count)", "schema": "\(config.database.schema)"])
        readiness.markReady()
        MemoryTuning.releaseFreeMemory()
    }
    return app
}

/// Runs the relay and the consumer once migrations are done.
struct EventBus: Service {
    let readiness: Readiness
    let relay: OutboxRelay
    let consumer: EventConsumer

    func run() async throws {
        await cancelWhenGracefulShutdown { await readiness.wait() }
        guard !Task.isCancelled, !Task.isShuttingDownGracefully else { return }
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await relay.run() }
            group.addTask { try await consumer.run() }
        }
    }
}

/// Starts a service's own background work once migrations are done (its tables exist).
struct AfterMigrations: Service {
    let readiness: Readiness
    let service: any Service

    func run() async throws {
        await cancelWhenGracefulShutdown { await readiness.wait() }
        guard !Task.isCancelled, !Task.isShuttingDownGracefully else { return }
        try await service.run()
    }
}

/// Says in the log when a graceful shutdown (SIGTERM, SIGINT) begins.
public struct ShutdownNotice: Service {
    let logger: Logger
    public init(logger: Logger) { self.logger = logger }
    public func run() async throws {
        try? await gracefulShutdown()
        logger.info("graceful shutdown started: finishing in-flight requests, then stopping the event bus and pools")
    }
}

/// Releases resources after every other service has stopped.
public struct Closer: Service {
    let close: @Sendable () async -> Void
    public init(_ close: @escaping @Sendable () async -> Void) { self.close = close }
    public func run() async throws {
        try? await gracefulShutdown()
        await close()
    }
}
