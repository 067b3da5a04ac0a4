import Logging
import PostgresNIO
import ServiceKitCore

// PostgresNIO 1.33 writes every statement with `channel.write(…, promise: nil)`. Once a closed
// channel's pipeline is torn down, such a write is dropped without a word and the statement waits
// forever: the task awaiting it, and any loop built on it (the outbox relay, the event consumer), is
// stuck until the process restarts. The pipeline is torn down on the channel's own event loop, after
// the channel stops being active. So a statement written from that loop right after seeing the
// connection open can never be dropped: the handler gets it and fails it if the connection has
// closed. `withConnectionOnItsLoop` runs a connection's work on its loop and `checkedQuery` makes the
// check; every statement in the services goes through the two.

extension PostgresClient {
    /// Leases a pooled connection and runs `body` on the connection's own event loop, so that its
    /// `checkedQuery` and `checkedExecute` calls write without a hop. Work on the connection's loop
    /// also saves a thread hop per statement; keep bodies to database work, since everything in them
    /// (child tasks included) shares that loop with its sockets.
    ///
    /// Within a request (a `DatabaseBudget` is set), the wait for the connection ends at the
    /// budget's deadline, or when the database is known to be out of reach. Every lease passes the
    /// pool's `LeaseGate` first.
    public func withConnectionOnItsLoop<Result: Sendable>(_ body: (PostgresConnection) async throws -> sending Result) async throws -> Result {
        try await withOpenConnectionOnItsLoop(body, budget: DatabaseBudget.current, closedHeld: 0)
    }

    /// How many closed connections one lease may be handed in a row before its work is refused.
    static let closedConnectionsPerLease = 3

    // The pool hears that a connection closed through a callback it registers only after handing the
    // new connection out, so one closed during its first lease (a failed preparation closes it) can
    // be handed out again before the pool knows. Nothing was written to it. It is held while another
    // is leased, so the pool cannot hand it out once more; the pool opens a replacement when it hears
    // of the closure (the services keep their whole pool open: `minimumConnections`), or serves the
    // lease when another comes back. A budget's wait counts from the first lease; the body's own
    // leases, if any, keep the request's whole budget.
    private func withOpenConnectionOnItsLoop<Result: Sendable>(
        _ body: (PostgresConnection) async throws -> sending Result, budget: DatabaseBudget?, closedHeld: Int
    ) async throws -> Result {
        let asked = ContinuousClock.now
        return try await leaseOnItsLoop(within: budget) { connection in
            guard connection.isClosed else { return try await body(connection) }
            guard closedHeld + 1 < Self.closedConnectionsPerLease else { throw DatabaseConnectionClosed() }
            var left = budget
            if let budget {
                let waited = ContinuousClock.now - asked
                guard waited < budget.maxWait else { throw DatabaseWaitExceeded(unreachable: false) }
                left?.maxWait = budget.maxWait - waited
            }
            return try await self.withOpenConnectionOnItsLoop(body, budget: left, closedHeld: closedHeld + 1)
        }
    }

    private func leaseOnItsLoop<Result: Sendable>(
        within budget: DatabaseBudget?, _ body: (PostgresConnection) async throws -> sending Result
    ) async throws -> Result {
        guard let budget else {
            let pass = try await LeaseGate.of(self).enter()
            defer { pass.leave() }
            return try await withConnection { connection in
                pass.leave()
                return try await withTaskExecutorPreference(EventLoopTaskExecutor.for(connection.eventLoop)) {
                    try await body(connection)
                }
            }
        }
        return try await withConnection(within: budget) { connection in
            try await withTaskExecutorPreference(EventLoopTaskExecutor.for(connection.eventLoop)) {
                try await body(connection)
            }
        }
    }

    /// One statement on a pooled connection, its rows read whole before the connection goes back.
    public func checkedQuery<Row: Sendable>(_ query: PostgresQuery, decoding: Row.Type, logger: Logger) async throws -> [Row] where Row: PostgresDecodable {
        try await withConnectionOnItsLoop { connection in
            var rows: [Row] = []
            for try await row in try await connection.checkedQuery(query, logger: logger).decode(Row.self) { rows.append(row) }
            return rows
        }
    }

    /// One statement on a pooled connection whose rows, if any, are not wanted.
    public func checkedQuery(_ query: PostgresQuery, logger: Logger) async throws {
        try await withConnectionOnItsLoop { connection in
            try await connection.checkedRun(query, logger: logger)
        }
    }
}

extension PostgresConnection {
    /// Runs `body` on this connection's event loop, where `checkedQuery` writes without a hop.
    @concurrent package func onItsLoop<Result: Sendable>(_ body: () async throws -> sending Result) async throws -> Result {
        try await withTaskExecutorPreference(EventLoopTaskExecutor.for(eventLoop)) { try await body() }
    }

    /// `query`, refused with `DatabaseConnectionClosed` when the connection has closed. On the
    /// connection's loop (inside `withConnectionOnItsLoop`) the check and the write cannot be split;
    /// called off it, it moves there first. `@concurrent` keeps it on the preferred executor whatever
    /// the caller's isolation (a caller-isolated function would run the check on the caller's actor).
    ///
    /// Read the rows to their end, or use `checkedRun`: an error PostgreSQL sends after a statement's
    /// first answer (its row description, or a row) travels with the rows, so a sequence left unread
    /// drops it, and the transaction's `COMMIT` then rolls back.
    @concurrent public func checkedQuery(_ query: PostgresQuery, logger: Logger, file: String = #fileID, line: Int = #line) async throws -> PostgresRowSequence {
        guard eventLoop.inEventLoop else {
            return try await withTaskExecutorPreference(EventLoopTaskExecutor.for(eventLoop)) { try await self.openQuery(query, logger: logger, file: file, line: line) }
        }
        return try await openQuery(query, logger: logger, file: file, line: line)
    }

    /// `checkedQuery` for a statement whose rows, if any, are not wanted: read to the end, so that
    /// an error that comes after the statement's first answer (a deadlock, a lock or statement
    /// timeout, a failed check while it runs) is thrown here.
    public func checkedRun(_ query: PostgresQuery, logger: Logger, file: String = #fileID, line: Int = #line) async throws {
        for try await _ in try await checkedQuery(query, logger: logger, file: file, line: line) {}
    }

    /// `execute` for a prepared statement, with the same check as `checkedQuery`.
    ///
    /// PostgresNIO prepares the statement on a connection's first use of it and remembers a failed
    /// preparation for the life of the connection: every later use there fails the same way. The
    /// preparation can fail for reasons that pass, such as a lock a migration holds past the
    /// statement timeout, or a transaction that had already failed. So when the server refuses the
    /// statement before any row, for any reason but the values it met, the connection is closed, and
    /// the pool opens a fresh one.
    ///
    /// PostgresNIO hands back the rows once it has their description, and an error while the
    /// statement runs (a deadlock, a lock or statement timeout) comes through them; a statement with
    /// no rows to describe throws it here instead, where it looks like a failed preparation. So every
    /// prepared statement returns rows: a write ends in `RETURNING`.
    @concurrent public func checkedExecute<Statement: PostgresPreparedStatement, Row>(_ statement: Statement, logger: Logger, file: String = #fileID, line: Int = #line)
        async throws -> AsyncThrowingMapSequence<PostgresRowSequence, Row> where Row == Statement.Row
    {
        guard eventLoop.inEventLoop else {
            return try await withTaskExecutorPreference(EventLoopTaskExecutor.for(eventLoop)) { try await self.openExecute(statement, logger: logger, file: file, line: line) }
        }
        return try await openExecute(statement, logger: logger, file: file, line: line)
    }

    /// Errors about the values a statement met (integrity constraints, class 23; data, class 22),
    /// which preparing it, before any value is bound, cannot give: the connection stays.
    static func onlyFromExecution(_ error: PSQLError) -> Bool {
        ["22", "23"].contains((error.serverInfo?[.sqlState] ?? "").prefix(2))
    }

    @concurrent private func openQuery(_ query: PostgresQuery, logger: Logger, file: String, line: Int) async throws -> PostgresRowSequence {
        guard !isClosed else { throw DatabaseConnectionClosed() }
        return try await self.query(query, logger: logger, file: file, line: line)
    }

    @concurrent private func openExecute<Statement: PostgresPreparedStatement, Row>(_ statement: Statement, logger: Logger, file: String, line: Int)
        async throws -> AsyncThrowingMapSequence<PostgresRowSequence, Row> where Row == Statement.Row
    {
        guard !isClosed else { throw DatabaseConnectionClosed() }
        do {
            return try await self.execute(statement, logger: logger, file: file, line: line)
        } catch let error as PSQLError where error.serverInfo != nil && !Self.onlyFromExecution(error) {
            logger.warning(
                "closing a database connection after a prepared statement failed on it",
                metadata: [
                    "statement": "\(Statement.name)", "sql_state": "\(error.serverInfo?[.sqlState] ?? "")",
                ])
            // Closed before the lease goes back, so the pool does not hand it out again.
            try? await self.close().get()
            throw error
        }
    }
}
/// A prepared statement with one parameter, `$1`: the bindings such statements wrote alike, from
/// the value `parameter` names (the statement's own field, under its own name).
public protocol OneParameterStatement: PostgresPreparedStatement {
    associatedtype Parameter: PostgresNonThrowingEncodable
    var parameter: Parameter { get }
}

extension OneParameterStatement {
    @inlinable public func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(parameter)
        return bindings
    }
}
