import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import ServiceKitCore

extension PostgresClient {
    /// The service's pool: its own role, `search_path` set to its own schema, a statement timeout on
    /// every connection so a runaway query cannot hold a connection forever.
    public convenience init(database config: DatabaseConfig, logger: Logger) {
        var configuration = PostgresClient.Configuration(
            host: config.host, port: config.port, username: config.user, password: config.password,
            database: config.database, tls: config.requireTLS ? .require(.makeClientConfiguration()) : .disable
        )
        configuration.options.maximumConnections = config.poolSize
        configuration.options.connectTimeout = .seconds(5)
        // A copy given a smaller pool (the outbox relay's) keeps at most its size open. At least one:
        // PostgresNIO 1.33's pool replaces a closed connection only to keep its minimum, not for the
        // requests queued on it. With none kept, requests queued while PostgreSQL ended every
        // connection (a restart, an outage) would wait until some new request opened one.
        // The services keep the whole pool (`ServiceConfig`): with fewer kept, the pool retires
        // connections idle for 60 s, and a request arriving while one is being retired just as
        // PostgreSQL ends the kept ones fails a precondition in the pool and stops the process.
        configuration.options.minimumConnections = max(1, min(config.minimumConnections, config.poolSize))
        // PostgresNIO's keep-alive writes its `SELECT 1` unchecked (see `checkedQuery`): one that hangs
        // holds the pool's run loop, and with it graceful shutdown. A connection the server closes is
        // noticed at once without it, and DatabaseWatch probes the server every second.
        configuration.options.keepAliveBehavior = nil
        let timeoutMs = config.statementTimeout.components.seconds * 1000 + config.statementTimeout.components.attoseconds / 1_000_000_000_000_000
        // JIT off: PostgreSQL compiles a statement whose estimated cost passes `jit_above_cost` on
        // every execution, which takes tens of milliseconds, for statements that run in well under
        // one. A generic plan's estimate can pass it while the statement reads three rows.
        configuration.options.additionalStartupParameters = [
            ("search_path", config.schema),
            ("statement_timeout", String(timeoutMs)),
            ("application_name", config.schema),
            ("jit", "off"),
        ]
        self.init(configuration: configuration, backgroundLogger: logger)
    }
}

/// Quotes an SQL identifier (schema, role) that cannot be a bound parameter.
package func quoteIdentifier(_ name: String) -> String {
    "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// Quotes an SQL string literal, for the few statements (`CREATE ROLE … PASSWORD`) that take no parameters.
package func quoteLiteral(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
}

extension PostgresConnection {
    /// Runs a statement and says whether it returned a row: whether `INSERT … ON CONFLICT DO NOTHING
    /// RETURNING` inserted, `DELETE … RETURNING` deleted, a `SELECT 1 …` found something.
    /// The rows are read to the end (see `checkedQuery`): an error after the first row is thrown.
    public func returnsRow(_ query: PostgresQuery, logger: Logger) async throws -> Bool {
        var returned = false
        for try await _ in try await self.checkedQuery(query, logger: logger) { returned = true }
        return returned
    }

    /// `returnsRow` for a prepared statement, through `checkedExecute`.
    public func returnsRow<Statement: PostgresPreparedStatement>(_ statement: Statement, logger: Logger) async throws -> Bool {
        var returned = false
        for try await _ in try await self.checkedExecute(statement, logger: logger) { returned = true }
        return returned
    }
}

extension PostgresClient {
    /// A transaction on a pooled connection that throws the body's own error (an `APIError`, a
    /// `MigrationError`), or PostgreSQL's for `BEGIN`/`COMMIT`. Workers given work inside it (an
    /// outbox row, a mail) are woken once it has committed (`WorkBell`).
    ///
    /// It does not use PostgresNIO's `withTransaction`, which sent `ROLLBACK` on a connection that
    /// PostgreSQL had just dropped, and hung there (see `withConnectionOnItsLoop`). Here a closed
    /// connection is never asked anything: the server has already rolled its transaction back. The body
    /// runs on the connection's loop and must use `checkedQuery`.
    public func transaction<Result: Sendable>(logger: Logger, _ body: (PostgresConnection) async throws -> sending Result) async throws -> Result {
        try await transaction(beginning: "BEGIN;", logger: logger, body)
    }

    /// Reads that must agree with each other (a session and its sets, a page and the sets of its
    /// sessions): a read-only transaction whose statements all see the one snapshot its first took
    /// (`REPEATABLE READ`; in PostgreSQL's default each statement takes its own, and a write
    /// committed between two of them shows in the second alone). Read-only, it never fails to
    /// serialize. It costs the two round trips of `BEGIN` and `COMMIT`.
    public func snapshot<Result: Sendable>(logger: Logger, _ body: (PostgresConnection) async throws -> sending Result) async throws -> Result {
        try await transaction(beginning: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;", logger: logger, body)
    }

    private func transaction<Result: Sendable>(
        beginning begin: String, logger: Logger, _ body: (PostgresConnection) async throws -> sending Result
    ) async throws -> Result {
        try await WorkBell.afterCommit {
            try await withConnectionOnItsLoop { connection in
                try await connection.checkedRun(PostgresQuery(unsafeSQL: begin), logger: logger)
                let result: Result
                do {
                    result = try await body(connection)
                } catch {
                    _ = try? await connection.checkedRun("ROLLBACK;", logger: logger)
                    throw error
                }
                try await connection.checkedRun("COMMIT;", logger: logger)
                return result
            }
        }
    }
}

/// The pool handed out a connection that had already closed.
package struct DatabaseConnectionClosed: Error, CustomStringConvertible {
    package var description: String { "the database connection had closed" }
}

/// Whether `error` means PostgreSQL is out of reach (down, restarting, refusing connections, the
/// connection dropped mid-query, a statement cut off by the statement timeout) rather than that the
/// request was wrong. Requests that meet one answer 503 with `Retry-After`, not 500.
///
/// While PostgreSQL is unreachable, PostgresNIO's pool queues requests and retries the connection with
/// back-off; after 60 s of failures it fails queued and new requests at once (`connectionCreationCircuitBreakerTripped`)
/// and keeps retrying. A request does not wait for that: its `DatabaseBudget` ends the wait when
/// `DatabaseWatch` sees the outage, or at the statement timeout, and the watch closes the gate on new ones.
package func isDatabaseUnavailable(_ error: any Error) -> Bool {
    switch error {
    case is DatabaseConnectionClosed, is DatabaseWaitExceeded:
        return true
    case _ where isPoolOutOfReach(error):
        return true
    case let error as PSQLError:
        switch error.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed:
            return true
        case .server:
            // 57P01–57P03: shutting down or starting up; 53300: too many connections; 57014: the
            // statement timeout cancelled the query (an overloaded or locked database); 53100 and
            // 53200: out of disk space or memory (the server's trouble, however the request was).
            guard let state = error.serverInfo?[.sqlState] else { return false }
            return state.hasPrefix("57P") || ["53100", "53200", "53300", "57014"].contains(state)
        default:
            return false
        }
    default:
        return false
    }
}

extension DatabaseConfig {
    /// One connection of the service's own, outside the pool (the outage probe, the change feed):
    /// the same role and server, TLS when required, and no pool options.
    func singleConnection(connectTimeout: Duration) throws -> PostgresConnection.Configuration {
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password,
            database: database, tls: requireTLS ? .require(try NIOSSLContext(configuration: .makeClientConfiguration())) : .disable
        )
        configuration.options.connectTimeout = TimeAmount(connectTimeout)
        return configuration
    }
}
