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

/// What a service's routes and event handlers are built from: values, passed in, no globals.
public struct ServiceDependencies: Sendable {
    /// A connection (TLS included) to another API that takes longer than this is out of reach.
    public static let connectTimeout: Duration = .seconds(3)

    /// `httpClient`'s: connections made within `connectTimeout`, and as many at once to one host as
    /// the calls need (a vision model's run up to `ANALYZER_CONCURRENCY` at once), so that a call's
    /// deadline passes waiting for its answer, not for a connection: a call that timed out was one
    /// the other side had.
    static var httpClientConfiguration: HTTPClient.Configuration {
        var configuration = HTTPClient.Configuration()
        configuration.timeout.connect = .seconds(connectTimeout.components.seconds)
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 1_024
        return configuration
    }

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
    package var defaultPort: Int
    public var migrations: @Sendable () throws -> [Migration]
    /// The service's `openapi.yaml` (`bundledOpenAPIDocument(.module)`), served at `GET /openapi.yaml`
    /// by `OpenAPIDocumentRoute`; `nil` serves none.
    package var openAPIDocument: URL?
    /// Reads the service's own settings (throwing `ConfigurationError` naming every problem) and
    /// returns its parts. Called once per process, before anything starts.
    public var setup: @Sendable (ServiceConfig) throws -> ServiceSetup

    public init(
        name: String, defaultPort: Int,
        migrations: @escaping @Sendable () throws -> [Migration],
        openAPIDocument: URL? = nil,
        setup: @escaping @Sendable (ServiceConfig) throws -> ServiceSetup = { _ in ServiceSetup() }
    ) {
        self.name = name
        self.defaultPort = defaultPort
        self.migrations = migrations
        self.openAPIDocument = openAPIDocument
        self.setup = setup
    }

    /// The kit's tables and functions (the event bus's outbox and inbox, idempotency keys, the account
    /// hold) and then the service's own.
    package func allMigrations() throws -> [Migration] {
        EventBusSchema.migrations + IdempotencySchema.migrations + DeletedAccountsSchema.migrations + (try migrations())
    }

    /// Reads the service's `Migrations/*.sql` from its resource bundle. A bundle without the folder
    /// is a build that lost it, not a service without a schema: it must not start on its schema as if
    /// a newer build had applied everything there.
    public static func bundledMigrations(_ bundle: Bundle) throws -> [Migration] {
        guard let url = bundle.url(forResource: "Migrations", withExtension: nil) else { throw MigrationError.noFolder(bundle: bundle.bundlePath) }
        return try Migration.load(directory: url)
    }

    /// The service's `openapi.yaml` in its resource bundle (`Package.swift` copies it there).
    public static func bundledOpenAPIDocument(_ bundle: Bundle) -> URL? {
        bundle.url(forResource: "openapi", withExtension: "yaml")
    }
}

/// A service's own parts, built from its configuration by `ServiceDefinition.setup`.
public struct ServiceSetup: Sendable {
    /// Where access-token keys come from; `nil` means the issuer's JWKS over HTTP (`JWKS_URL`).
    /// The issuer itself passes its own keys.
    package var tokenSource: (any JWKSSource)?
    /// Extra command-line verbs beside `serve`, `migrate` and `provision`.
    package var commands: [String: ServiceCommand]
    /// Paths (prefixes) whose POSTs ignore `Idempotency-Key`: answers that must never be kept, such
    /// as sign-ins, whose responses are tokens and whose bodies are passwords.
    package var idempotencyExcluded: [String]
    /// How long a key's first request may run before a retry may take the key over (its process is
    /// taken for gone): longer than the service's slowest route can run.
    package var idempotencyAbandonedAfter: Duration
    /// The routes whose bodies may be larger than a JSON body (`maxUploadSize`): a photo's. A body
    /// with an `Idempotency-Key` is read whole (to be hashed) before its route runs, as far as this says.
    package var bodyLimits: BodyLimits
    /// Adds the service's routes to the router and returns its event handlers and background work;
    /// called once, when the application is built.
    package var build: @Sendable (Router<ServiceRequestContext>, ServiceDependencies) throws -> ServiceComponents

    public init(
        tokenSource: (any JWKSSource)? = nil,
        commands: [String: ServiceCommand] = [:],
        idempotencyExcluded: [String] = [],
        idempotencyAbandonedAfter: Duration = .seconds(60),
        bodyLimits: BodyLimits = BodyLimits(limits: [:]),
        build: @escaping @Sendable (Router<ServiceRequestContext>, ServiceDependencies) throws -> ServiceComponents = { _, _ in ServiceComponents() }
    ) {
        self.tokenSource = tokenSource
        self.commands = commands
        self.idempotencyExcluded = idempotencyExcluded
        self.idempotencyAbandonedAfter = idempotencyAbandonedAfter
        self.bodyLimits = bodyLimits
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
