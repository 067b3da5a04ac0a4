import Foundation
import ServiceKitCore

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
    package var minimumConnections: Int
    package var statementTimeout: Duration
    public var requireTLS: Bool
    /// How often `DatabaseWatch` checks that PostgreSQL answers.
    package var probeInterval: Duration = .seconds(1)

    /// `minimumConnections` defaults to one, the least a pool keeps (see `PostgresClient(database:)`),
    /// and not to the pool size: tests make many pools.
    public init(
        host: String, port: Int, user: String, password: String?, database: String, schema: String, poolSize: Int = 10, minimumConnections: Int = 1,
        statementTimeout: Duration = .seconds(10), requireTLS: Bool = false
    ) {
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

    public init(service: String, reading env: inout EnvironmentReader) {
        let url = env.url("DATABASE_URL", default: "postgres://\(service):\(service)@127.0.0.1:5432/foodbackend", schemes: ["postgres", "postgresql"], requiredInProduction: true)
        let poolSize = env.int("DATABASE_POOL_SIZE", default: 10, range: 1...200)
        self.init(
            host: url?.hostName ?? "127.0.0.1",
            port: url?.port ?? 5432,
            user: url?.user ?? service,
            password: url?.password,
            database: url.map { String($0.path.dropFirst()) }.flatMap { $0.isEmpty ? nil : $0 } ?? "foodbackend",
            schema: env.string("DATABASE_SCHEMA", default: service),
            poolSize: poolSize,
            minimumConnections: poolSize,
            statementTimeout: env.milliseconds("DATABASE_STATEMENT_TIMEOUT_MS", default: 10_000, range: 100...3_600_000),
            requireTLS: url?.queryValue("sslmode") == "require"
        )
        probeInterval = env.milliseconds("DATABASE_PROBE_INTERVAL_MS", default: 1_000, range: 100...60_000)
        if !schema.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) {
            env.report("DATABASE_SCHEMA: must be letters, digits and _, got \"\(schema)\"")
        }
    }
}
