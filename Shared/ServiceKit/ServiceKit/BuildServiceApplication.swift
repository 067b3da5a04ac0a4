import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import Models
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import ServiceLifecycle

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
    let httpClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: ServiceDependencies.httpClientConfiguration)
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
    let routeIndex = RouteIndex()
    router.add(middleware: MethodNotAllowedMiddleware(index: routeIndex))
    router.add(middleware: DatabaseGateMiddleware(watch: databaseWatch, budget: config.database.statementTimeout))
    let health = HealthRoutes<ServiceRequestContext>(postgres: postgres, redis: redis, readiness: readiness, metrics: registry)
    health.add(to: router)
    if let document = definition.openAPIDocument {
        try OpenAPIDocumentRoute(contentsOf: document).add(to: router)
    }
    let adminRouter = Router(context: ServiceRequestContext.self)
    adminRouter.add(middleware: ProblemMiddleware())
    health.addAdmin(to: adminRouter)
    router.add(middleware: TokenMiddleware(verifier: tokens))
    // Before the idempotency middleware, which reads a body with a key whole.
    if !setup.bodyLimits.limits.isEmpty {
        router.add(middleware: UploadSlotsMiddleware(routes: setup.bodyLimits, slots: UploadSlots(perUser: config.uploadsPerUser, registry: registry)))
    }
    router.add(middleware: IdempotencyMiddleware(postgres: postgres, excludedPrefixes: setup.idempotencyExcluded, abandonedAfter: setup.idempotencyAbandonedAfter, bodyLimits: setup.bodyLimits))
    let components = try setup.build(router, dependencies)
    routeIndex.record(router)

    let migrations = try definition.allMigrations()
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
            Closer {
                try? await httpClient.shutdown(); await redis.close(); await consumerRedis.close()
            },
            AdminListener(router: adminRouter, options: config.admin, serverName: definition.name, logger: logger),
            postgres,
            relayPostgres,
            databaseWatch,
            EventBus(readiness: readiness, relay: relay, consumer: consumer),
            SigningKeysPrefetch(tokens: tokens, logger: logger),
            AfterMigrations(readiness: readiness, service: IdempotencyJanitor(postgres: postgres, logger: logger)),
        ] + components.services.map { AfterMigrations(readiness: readiness, service: $0) } + [
            ShutdownNotice(logger: logger)
        ],
        logger: logger
    )
    app.routeIndex = routeIndex
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
