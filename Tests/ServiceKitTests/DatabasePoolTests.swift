import Foundation
import Models
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing
import TestSupport

/// The pool's minimum: opened at start, kept while idle, and opened again when PostgreSQL drops them.
@Suite struct DatabasePoolTests {
    /// With a minimum below the pool (a burst opens one more) and equal to it (the services' default).
    @Test(arguments: [(poolSize: 4, minimum: 3), (poolSize: 3, minimum: 3)])
    func theMinimumIsOpenedAtStartAndReopenedAfterTheServerDropsIt(pool: (poolSize: Int, minimum: Int)) async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let config = {
            var config = database.config(for: "social", poolSize: pool.poolSize); config.minimumConnections = pool.minimum; return config
        }()
        let admin = try database.adminConfig()
        try await withClient(admin) { adminClient in
            /// The backends serving the pool's role.
            @Sendable func backends() async throws -> Set<Int> {
                let rows = try await adminClient.query(
                    "SELECT pid FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social'", logger: TestEnvironment.logger)
                var pids: Set<Int> = []
                for try await pid in rows.decode(Int.self) { pids.insert(pid) }
                return pids
            }
            @Sendable func open() async throws -> Int { try await backends().count }
            /// Waits for `expected` backends, none of them one of `gone` (`pg_terminate_backend` only
            /// signals: a terminated backend stays listed until it has exited, so a bare count could
            /// pass on the way down).
            @Sendable func waitFor(_ expected: Int, excluding gone: Set<Int> = [], _ what: String) async throws {
                let deadline = ContinuousClock.now + .seconds(10)
                var pids = try await backends()
                while pids.count != expected || !pids.isDisjoint(with: gone), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                    pids = try await backends()
                }
                #expect(pids.count == expected && pids.isDisjoint(with: gone), "\(what): \(pids.count) connections open (\(pids.intersection(gone).count) of them ended), expected \(expected)")
            }
            try await withClient(config) { client in
                try await waitFor(3, "at start, before any request")
                // A burst opens the rest of the pool; idle again, they all stay (the others for 60 s).
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<8 { group.addTask { try await client.query("SELECT pg_sleep(0.2)", logger: TestEnvironment.logger) } }
                    try await group.waitForAll()
                }
                let before = try await backends()
                #expect(before.count == pool.poolSize)
                try await adminClient.query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social'", logger: TestEnvironment.logger)
                try await waitFor(3, excluding: before, "after PostgreSQL ended every connection")
                // A connection whose end the pool has not read yet may still be handed out once: that
                // statement fails as "unavailable" (a 503 in a service), and the next one is served.
                // Through the checked path, as the services' statements: a plain `query` written to
                // that connection would wait forever.
                let deadline = ContinuousClock.now + .seconds(5)
                while true {
                    do {
                        try await client.checkedQuery("SELECT 1", logger: TestEnvironment.logger)
                        break
                    } catch {
                        #expect(isDatabaseUnavailable(error), "\(String(reflecting: error))")
                        guard isDatabaseUnavailable(error), ContinuousClock.now < deadline else { throw error }
                        try await Task.sleep(for: .milliseconds(50))
                    }
                }
            }
        }
    }

    /// A request queued behind a full pool when PostgreSQL ends every connection (a restart) is served
    /// by a connection the pool opens again, with no newer request to prompt it. PostgresNIO 1.33
    /// reopens connections only up to the pool's minimum: with none kept, that request waited forever.
    @Test(.timeLimit(.minutes(1))) func aRequestQueuedWhilePostgreSQLEndsEveryConnectionIsServed() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        // Asks to keep none: the pool keeps one all the same.
        let config = {
            var config = database.config(for: "social", poolSize: 2); config.minimumConnections = 0; return config
        }()
        let logger = TestEnvironment.logger
        try await withClient(try database.adminConfig()) { adminClient in
            @Sendable func sleepers() async throws -> Int {
                let rows = try await adminClient.query(
                    "SELECT count(*)::int FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social' AND query LIKE 'SELECT pg_sleep(30)%'",
                    logger: logger)
                for try await count in rows.decode(Int.self) { return count }
                return 0
            }
            try await withClient(config) { client in
                // Two long statements hold the whole pool, and a third request queues behind them. Each
                // holder keeps its lease until the pool has seen its connection end: a connection given
                // back before that could still be handed to the queued request, which would then fail
                // at once as "unavailable" (see the test above) instead of waiting for a new one.
                let holders = (0..<2).map { _ in
                    Task {
                        try await client.withConnectionOnItsLoop { connection in
                            await #expect(throws: (any Error).self) {
                                for try await _ in try await connection.checkedQuery("SELECT pg_sleep(30)", logger: logger) {}
                            }
                            try await connection.closeFuture.get()
                            try await Task.sleep(for: .milliseconds(300))
                        }
                    }
                }
                let deadline = ContinuousClock.now + .seconds(10)
                while try await sleepers() < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
                #expect(try await sleepers() == 2)
                // The pool cannot be asked whether the request has queued: a second is long enough on a
                // busy machine, and one that had not would be served by a new connection and pass.
                let queued = Task { try await client.checkedQuery("SELECT 1", logger: logger) }
                try await Task.sleep(for: .seconds(1))
                try await adminClient.query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social'", logger: logger)
                for holder in holders { try await holder.value }
                try await withTimeout(.seconds(10), what: "the request queued when PostgreSQL ended the pool's connections") {
                    try await queued.value
                }
            }
        }
    }

    /// PostgreSQL refusing new connections (as while it restarts: here the database's connection
    /// limit is set to zero) after ending every connection of a pool whose minimum is the whole pool
    /// (the services' setting), with requests queued, then accepting them again while more arrive:
    /// every request is served, and the process lives on. Without `LeaseGate`, PostgresNIO 1.33's
    /// pool came back with fewer connections than its minimum and stopped the process on a
    /// precondition as the next request arrived.
    @Test(.timeLimit(.minutes(1))) func requestsQueuedWhileConnectionsAreRefusedAreServedOnceTheyAreAccepted() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let config = {
            var config = database.config(for: "social", poolSize: 10); config.minimumConnections = 10; return config
        }()
        let logger = TestEnvironment.logger
        try await withClient(try database.adminConfig()) { adminClient in
            @Sendable func open() async throws -> Int {
                let rows = try await adminClient.query(
                    "SELECT count(*)::int FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social'", logger: logger)
                for try await count in rows.decode(Int.self) { return count }
                return 0
            }
            @Sendable func waitFor(_ expected: Int) async throws {
                let deadline = ContinuousClock.now + .seconds(10)
                while try await open() != expected, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
                #expect(try await open() == expected)
            }
            /// A statement retried while it meets a connection the pool has not yet seen end.
            @Sendable func served(_ statement: PostgresQuery, by client: PostgresClient) async throws {
                let deadline = ContinuousClock.now + .seconds(20)
                while true {
                    do {
                        try await client.checkedQuery(statement, logger: logger)
                        return
                    } catch  where isDatabaseUnavailable(error) && ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(20))
                    }
                }
            }
            try await withClient(config) { client in
                try await waitFor(10)
                try await adminClient.query("ALTER DATABASE \(unescaped: quoteIdentifier(database.name)) CONNECTION LIMIT 0", logger: logger)
                try await adminClient.query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social'", logger: logger)
                try await waitFor(0)
                // Queued while every attempt to connect is refused; slow enough that the queue is still
                // draining when the newer requests below arrive.
                let queued = (0..<12).map { _ in Task { try await served("SELECT pg_sleep(0.3)", by: client) } }
                try await Task.sleep(for: .seconds(1))
                try await adminClient.query("ALTER DATABASE \(unescaped: quoteIdentifier(database.name)) CONNECTION LIMIT -1", logger: logger)
                // The pool tries again after a back-off of up to a second by now: newer requests keep
                // arriving until well after that.
                var newer: [Task<Void, any Error>] = []
                let until = ContinuousClock.now + .seconds(3)
                while ContinuousClock.now < until {
                    newer.append(Task { try await served("SELECT 1", by: client) })
                    try await Task.sleep(for: .milliseconds(5))
                }
                for task in queued + newer { try await task.value }
                try await waitFor(10)
            }
        }
    }

    /// PostgresNIO remembers a prepared statement that failed to prepare for the life of its
    /// connection. Here the outbox insert is first sent into a transaction that has already failed
    /// (its preparation is refused), on a pool of one connection: afterwards the pool still writes
    /// events, because `checkedExecute` closed that connection and a fresh one took its place.
    @Test func aStatementThatFailedToPrepareLeavesNoConnectionFailingForGood() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let logger = TestEnvironment.logger
        let outbox = EventOutbox(producer: "social")
        @Sendable func event() -> UserRegistered { UserRegistered(userID: UUID(), email: "pool@example.com", displayName: nil, provider: "email") }
        try await withClient(database.config(for: "social", poolSize: 1)) { client in
            try await MigrationRunner(client: client, schema: "social", migrations: EventBusSchema.migrations, logger: logger).run()
            try await client.withConnectionOnItsLoop { connection in
                try await connection.checkedRun("BEGIN", logger: logger)
                do {
                    for try await _ in try await connection.checkedQuery("SELECT 1 / 0", logger: logger) {}
                    Issue.record("1 / 0 was answered")
                } catch {}
                await #expect(throws: PSQLError.self) { try await outbox.write(event(), userID: nil, on: connection, logger: logger) }
                _ = try? await connection.checkedQuery("ROLLBACK", logger: logger)
            }
            // The pool may still hand out the closed connection once (refused at once as closed);
            // a connection that remembered the failure would fail every time.
            var written = 0
            let deadline = ContinuousClock.now + .seconds(10)
            while written < 3, ContinuousClock.now < deadline {
                do {
                    _ = try await client.transaction(logger: logger) { connection in
                        try await outbox.write(event(), userID: nil, on: connection, logger: logger)
                    }
                    written += 1
                } catch let error as PSQLError {
                    Issue.record("the outbox insert failed again: \(String(reflecting: error))")
                    break
                } catch {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            #expect(written == 3)
            // A refusal for the values the statement met (here a duplicate id) leaves the connection open.
            let envelope = try EventEnvelope(event(), producer: "social", userID: nil)
            try await client.transaction(logger: logger) { connection in try await outbox.write(envelope, on: connection, logger: logger) }
            try await client.withConnectionOnItsLoop { connection in
                try await connection.checkedRun("BEGIN", logger: logger)
                await #expect(throws: PSQLError.self) { try await outbox.write(envelope, on: connection, logger: logger) }
                _ = try? await connection.checkedQuery("ROLLBACK", logger: logger)
                #expect(!connection.isClosed)
            }
            var rows = 0
            for try await count in try await client.query("SELECT count(*)::int FROM outbox", logger: logger).decode(Int.self) { rows = count }
            #expect(rows == 4)
        }
    }

    /// Reads in `snapshot` agree with each other: a write another connection commits between two of
    /// them shows in neither, and shows once it has ended. It writes nothing.
    @Test func aSnapshotsStatementsSeeOneState() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let logger = TestEnvironment.logger
        let outbox = EventOutbox(producer: "social")
        let event = UserRegistered(userID: UUID(), email: "snapshot@example.com", displayName: nil, provider: "email")
        try await withClient(database.config(for: "social", poolSize: 2)) { client in
            try await MigrationRunner(client: client, schema: "social", migrations: EventBusSchema.migrations, logger: logger).run()
            @Sendable func count(_ connection: PostgresConnection) async throws -> Int {
                var rows = -1
                for try await count in try await connection.checkedQuery("SELECT count(*)::int FROM outbox", logger: logger).decode(Int.self) { rows = count }
                return rows
            }
            let seen = try await client.snapshot(logger: logger) { connection in
                let before = try await count(connection)
                // Another connection: the pool holds this one until the snapshot ends.
                _ = try await client.transaction(logger: logger) { other in try await outbox.write(event, userID: nil, on: other, logger: logger) }
                return (before, try await count(connection))
            }
            #expect(seen == (0, 0))
            #expect(try await client.withConnectionOnItsLoop { try await count($0) } == 1)
            let another = UserRegistered(userID: UUID(), email: "snapshot2@example.com", displayName: nil, provider: "email")
            do {
                _ = try await client.snapshot(logger: logger) { connection in try await outbox.write(another, userID: nil, on: connection, logger: logger) }
                Issue.record("a snapshot wrote")
            } catch let error as PSQLError {
                // read_only_sql_transaction
                #expect(error.serverInfo?[.sqlState] == "25006", "\(String(reflecting: error))")
            }
            #expect(try await client.withConnectionOnItsLoop { try await count($0) } == 1)
        }
    }
}
