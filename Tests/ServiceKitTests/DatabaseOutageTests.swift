// The test throws PostgresNIO's own `ConnectionPoolError`, which only its underscored module declares
// (no public module re-exports it): it is how this test fails loudly if ConnectionPoolErrors.swift
// stops recognising the pool's errors.
import _ConnectionPoolModule
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Models
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Synchronization
import Testing
import TestSupport

/// A database out of reach is the server's trouble, not the client's: 503 with `Retry-After`, never a
/// 500, and never a 4xx. A wrong query stays a 500.
@Suite struct DatabaseOutageTests {
    @Test func aStatementCutOffByTheTimeoutCountsAsUnavailableAndAWrongQueryDoesNot() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        var config = database.config(for: "social", poolSize: 1)
        config.statementTimeout = .milliseconds(100)
        try await withClient(config) { client in
            do {
                // The error comes with the rows, after the statement has started.
                for try await _ in try await client.query("SELECT pg_sleep(2)", logger: TestEnvironment.logger) {}
                Issue.record("the statement timeout did not cut the query off")
            } catch {
                #expect(isDatabaseUnavailable(error), "\(String(reflecting: error))")
            }
            do {
                try await client.query("SELEC 1", logger: TestEnvironment.logger)
                Issue.record("a syntax error was accepted")
            } catch {
                #expect(!isDatabaseUnavailable(error), "\(String(reflecting: error))")
            }
        }
    }

    /// PostgreSQL out of disk space (`53100`, a table or index that cannot grow) or of memory
    /// (`53200`) fails the statement, not the request: a 503 with `Retry-After`, like an outage.
    @Test func aDatabaseOutOfDiskOrMemoryCountsAsUnavailable() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        try await withClient(database.config(for: "social", poolSize: 1)) { client in
            let statements: [PostgresQuery] = [
                "DO $$ BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full'; END $$",
                "DO $$ BEGIN RAISE EXCEPTION 'out of memory' USING ERRCODE = 'out_of_memory'; END $$",
            ]
            for statement in statements {
                do {
                    try await client.query(statement, logger: TestEnvironment.logger)
                    Issue.record("the statement did not fail")
                } catch {
                    #expect(isDatabaseUnavailable(error), "\(String(reflecting: error))")
                }
            }
        }
    }

    /// Nothing listens on the database port: the connection error PostgreSQL's client gives is a 503
    /// problem with `Retry-After`, as is the error its pool gives once it stops waiting for a
    /// connection, while a wrong query stays a 500.
    @Test func aRequestWhoseDatabaseIsOutOfReachIsA503WithRetryAfter() async throws {
        let closedPort = try RedisServer.freePort()
        let refused: any Error
        do {
            let connection = try await PostgresConnection.connect(
                configuration: .init(host: "127.0.0.1", port: closedPort, username: "social", password: "social", database: "nowhere", tls: .disable),
                id: 1, logger: TestEnvironment.logger)
            try await connection.close()
            Issue.record("connected to a closed port")
            return
        } catch {
            refused = error
        }
        #expect(isDatabaseUnavailable(refused), "\(String(reflecting: refused))")
        let router = Router(context: ServiceRequestContext.self)
        router.add(middleware: TelemetryMiddleware(metrics: HTTPMetrics(registry: MetricsRegistry())))
        router.add(middleware: ProblemMiddleware())
        router.get("refused") { _, _ -> String in throw refused }
        router.get("breaker") { _, _ -> String in throw ConnectionPoolError.connectionCreationCircuitBreakerTripped }
        struct Other: Error {}
        router.get("other") { _, _ -> String in throw Other() }
        router.get("cancelled") { _, _ -> String in throw CancellationError() }
        try await Application(router: router).test(.router) { client in
            for path in ["/refused", "/breaker"] {
                let response = try await client.execute(uri: path, method: .get)
                #expect(response.status == .serviceUnavailable, "\(path)")
                #expect(response.headers[.retryAfter] == "5")
                let problem = try JSONDecoder.api.decode(Problem.self, from: Data(buffer: response.body))
                #expect(problem.code == "service_unavailable" && problem.status == 503)
            }
            #expect(try await client.execute(uri: "/other", method: .get).status == .internalServerError)
            // A cancelled request (the process stopping) is no fault of the client's or of the code's.
            #expect(try await client.execute(uri: "/cancelled", method: .get).status == .serviceUnavailable)
        }
    }

    /// A deadlock victim (40P01), like the loser of a serialization conflict (40001), is a 409 the
    /// client can retry, not a 500: two transactions that each lock a row and then the other's.
    @Test(.timeLimit(.minutes(1))) func aDeadlockVictimIsAConflictToRetry() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let failures = try await withClient(database.config(for: "social", poolSize: 2)) { client -> [any Error] in
            try await client.query("CREATE TABLE deadlock_rows (id int PRIMARY KEY)", logger: TestEnvironment.logger)
            try await client.query("INSERT INTO deadlock_rows VALUES (1), (2)", logger: TestEnvironment.logger)
            return try await withThrowingTaskGroup(of: (any Error)?.self) { group in
                for (first, then) in [(1, 2), (2, 1)] {
                    group.addTask {
                        do {
                            try await client.transaction(logger: TestEnvironment.logger) { connection in
                                try await connection.checkedRun("SELECT 1 FROM deadlock_rows WHERE id = \(first) FOR UPDATE", logger: TestEnvironment.logger)
                                // Long enough for the other to have its first row (its connection may be new).
                                try await Task.sleep(for: .seconds(1))
                                try await connection.checkedRun("SELECT 1 FROM deadlock_rows WHERE id = \(then) FOR UPDATE", logger: TestEnvironment.logger)
                            }
                            return nil
                        } catch {
                            return error
                        }
                    }
                }
                return try await group.reduce(into: []) { if let error = $1 { $0.append(error) } }
            }
        }
        let victim = try #require(failures.first)
        #expect(failures.count == 1 && (victim as? PSQLError)?.serverInfo?[.sqlState] == "40P01", "\(failures.map { String(reflecting: $0) })")
        let router = Router(context: ServiceRequestContext.self)
        router.add(middleware: TelemetryMiddleware(metrics: HTTPMetrics(registry: MetricsRegistry())))
        router.add(middleware: ProblemMiddleware())
        router.get("deadlock") { _, _ -> String in throw victim }
        try await Application(router: router).test(.router) { client in
            let response = try await client.execute(uri: "/deadlock", method: .get)
            #expect(response.status == .conflict)
            #expect(try JSONDecoder.api.decode(Problem.self, from: Data(buffer: response.body)).code == "conflict")
        }
    }

    /// An error PostgreSQL sends after a row-returning statement's row description travels with its
    /// rows. Left unread, it aborts the transaction without a word, and PostgreSQL answers the
    /// `COMMIT` with `ROLLBACK` and no error: a lost write reported as done (the first half fails
    /// that way with the statement's rows left unread). `checkedRun` and `returnsRow` read to the
    /// end, so the error is thrown where it happened.
    @Test(.timeLimit(.minutes(1))) func aStatementErrorAfterItsFirstAnswerIsThrown() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        try await withClient(database.config(for: "social", poolSize: 1)) { client in
            let logger = TestEnvironment.logger
            try await client.checkedQuery("CREATE TABLE kept (id int)", logger: logger)
            await #expect(throws: PSQLError.self) {
                try await client.transaction(logger: logger) { connection in
                    try await connection.checkedRun("INSERT INTO kept VALUES (1)", logger: logger)
                    // Division by zero while the statement runs, after its row description.
                    try await connection.checkedRun("SELECT 1 / (random() * 0)::int", logger: logger)
                }
            }
            await #expect(throws: PSQLError.self) {
                try await client.transaction(logger: logger) { connection in
                    try await connection.checkedRun("INSERT INTO kept VALUES (2)", logger: logger)
                    // The first row comes back; the second fails.
                    _ = try await connection.returnsRow("SELECT x FROM (VALUES (1), (0)) AS v(x) WHERE 1 / x > 0", logger: logger)
                }
            }
            try await client.transaction(logger: logger) { connection in
                try await connection.checkedRun("INSERT INTO kept VALUES (3)", logger: logger)
            }
            #expect(try await client.checkedQuery("SELECT id FROM kept", decoding: Int32.self, logger: logger) == [3])
        }
    }

    /// PostgreSQL ending connections under busy transactions and pooled statements, as a restart or
    /// an outage does: every statement fails or succeeds, none waits forever. PostgresNIO 1.33 hangs a
    /// statement written to a connection whose channel has closed, and an outbox relay stuck on one
    /// stays stuck until its process restarts. Its pool, keeping no connection, left requests queued
    /// when the last one ended waiting forever (see `DatabasePoolTests`).
    @Test(.timeLimit(.minutes(2))) func statementsOnConnectionsPostgreSQLEndsNeverHang() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let config = database.config(for: "social", poolSize: 4)
        let admin = try database.adminConfig()
        let logger = TestEnvironment.logger
        let hung = Tally()
        let finished = Tally()
        let failed = Tally()
        // Where each worker is, so that a hang says which step it hung in.
        let stages = Steps()
        try await withClient(admin) { adminClient in
            try await withClient(config) { client in
                let deadline = ContinuousClock.now + .seconds(8)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for worker in 0..<6 {
                        group.addTask {
                            var round = 0
                            while ContinuousClock.now < deadline {
                                round += 1
                                let inTransaction = (worker + round) % 2 == 0
                                do {
                                    try await withTimeout(.seconds(20), what: "a statement") {
                                        let stage = { (step: String) in stages.set(worker, step) }
                                        if inTransaction {
                                            stage("transaction: lease and BEGIN")
                                            try await client.transaction(logger: logger) { connection in
                                                stage("transaction: SELECT 1")
                                                try await connection.checkedRun("SELECT 1", logger: logger)
                                                stage("transaction: pg_sleep")
                                                for try await _ in try await connection.checkedQuery("SELECT pg_sleep(0.002)", logger: logger) {}
                                                stage("transaction: COMMIT")
                                            }
                                        } else {
                                            stage("pooled: lease and SELECT 1")
                                            try await client.checkedQuery("SELECT 1", logger: logger)
                                        }
                                    }
                                    finished.increment()
                                } catch is TimeoutError {
                                    hung.increment()
                                    return
                                } catch {
                                    // Killed mid-statement: an error is the right answer.
                                    finished.increment()
                                    failed.increment()
                                }
                            }
                        }
                    }
                    group.addTask {
                        while ContinuousClock.now < deadline {
                            try await adminClient.query(
                                """
                                SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                                WHERE datname = current_database() AND usename = 'social'
                                """, logger: logger)
                            try await Task.sleep(for: .milliseconds(Int.random(in: 1...40)))
                        }
                    }
                    try await group.waitForAll()
                }
            }
        }
        #expect(hung.value == 0, "\(hung.value) workers hung on a statement (\(finished.value) statements ended); last steps: \(stages.all)")
        #expect(finished.value > 100)
        #expect(failed.value > 0, "no statement met a killed connection: the test proved nothing")
    }

    /// The same, without chance: a connection closed under a body is refused at the next statement,
    /// on its loop or off it (a body isolated to the main actor), and in a transaction.
    @Test(.timeLimit(.minutes(1))) func aStatementOnAClosedConnectionIsRefusedAtOnce() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let logger = TestEnvironment.logger
        try await withClient(database.config(for: "social", poolSize: 2)) { client in
            for round in 0..<3 {
                await #expect(throws: DatabaseConnectionClosed.self, "round \(round)") {
                    try await client.withConnectionOnItsLoop { connection in
                        try await connection.checkedRun("SELECT 1", logger: logger)
                        try await connection.close()
                        // Closed and torn down: a plain `query` here would never return.
                        try await connection.closeFuture.get()
                        switch round {
                        case 0: _ = try await connection.checkedQuery("SELECT 1", logger: logger)
                        case 1: try await Self.queryFromTheMainActor(connection, logger: logger)
                        default: for try await _ in try await connection.checkedExecute(OneRow(), logger: logger) {}
                        }
                    }
                }
            }
            await #expect(throws: DatabaseConnectionClosed.self) {
                try await client.transaction(logger: logger) { connection in
                    try await connection.close()
                    try await connection.closeFuture.get()
                    try await connection.checkedRun("SELECT 1", logger: logger)
                }
            }
        }
    }

    /// The pool learns that a connection closed through a callback it registers just after handing
    /// a new connection out, so one closed during its first lease can be handed out again for a
    /// moment: the lease that gets it takes another, and the statement runs, within a request's
    /// budget as without one.
    @Test(.timeLimit(.minutes(1))) func aConnectionClosedDuringItsLeaseIsNotUsedAgain() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let logger = TestEnvironment.logger
        for poolSize in [1, 2] {
            for budget in [nil, DatabaseBudget(maxWait: .seconds(10), watch: nil)] {
                try await withClient(database.config(for: "social", poolSize: poolSize)) { client in
                    try await DatabaseBudget.$current.withValue(budget) {
                        for round in 0..<20 {
                            try await client.withConnectionOnItsLoop { connection in
                                try await connection.close()
                                try await connection.closeFuture.get()
                            }
                            let rows = try await client.checkedQuery("SELECT 1::int4", decoding: Int32.self, logger: logger)
                            #expect(rows == [1], "pool of \(poolSize), budget \(budget != nil), round \(round)")
                        }
                    }
                }
            }
        }
    }

    @MainActor static func queryFromTheMainActor(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("SELECT 1", logger: logger)
    }

    struct OneRow: PostgresPreparedStatement {
        static let sql = "SELECT 1::int4"
        typealias Row = Int32
        func makeBindings() throws -> PostgresBindings { PostgresBindings() }
        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Int32.self) }
    }

    /// The watch probes on a connection of its own: against the live database it stays open; against
    /// a port where nothing listens it closes the gate after two failed probes, and then requests are
    /// 503 at once while health, readiness, metrics and the well-known documents still answer.
    @Test(.timeLimit(.minutes(1))) func theWatchClosesTheGateOnlyWhileTheDatabaseIsOutOfReach() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        var live = database.config(for: "social")
        live.probeInterval = .milliseconds(100)
        var nowhere = live
        nowhere.port = try RedisServer.freePort()
        for (config, reachable) in [(live, true), (nowhere, false)] {
            let watch = try DatabaseWatch(database: config, interval: config.probeInterval, logger: TestEnvironment.logger)
            let router = Router(context: ServiceRequestContext.self)
            router.add(middleware: TelemetryMiddleware(metrics: HTTPMetrics(registry: MetricsRegistry())))
            router.add(middleware: ProblemMiddleware())
            router.add(middleware: DatabaseGateMiddleware(watch: watch, budget: .seconds(10)))
            for path in ["v1/things", "healthz", "readyz", "metrics", ".well-known/jwks.json"] {
                router.get(RouterPath(path)) { _, _ in "answered" }
            }
            try await Application(router: router, services: [watch]).test(.live) { client in
                // Reachable: still so after several probes. Out of reach: seen so by the probes.
                if reachable {
                    try await Task.sleep(for: .milliseconds(600))
                } else {
                    try await waitUntil(.seconds(10)) { !watch.isReachable }
                }
                #expect(watch.isReachable == reachable)
                let response = try await client.execute(uri: "/v1/things", method: .get)
                if reachable {
                    #expect(response.status == .ok)
                } else {
                    #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "5")
                    #expect(try JSONDecoder.api.decode(Problem.self, from: Data(buffer: response.body)).code == "service_unavailable")
                }
                for path in ["/healthz", "/readyz", "/metrics", "/.well-known/jwks.json"] {
                    #expect(try await client.execute(uri: path, method: .get).status == .ok, "\(path)")
                }
            }
        }
    }

    /// A request waits for a pooled connection no longer than its budget: with the one connection of
    /// the pool busy, the wait ends at the deadline with a 503-class error; the queued lease is
    /// withdrawn (the pool is not left short), and once the connection is free the same call works.
    @Test(.timeLimit(.minutes(1))) func aRequestWaitsForAConnectionNoLongerThanItsBudget() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        try await withClient(database.config(for: "social", poolSize: 1)) { client in
            let busy = Task { try await client.checkedQuery("SELECT pg_sleep(8)", logger: TestEnvironment.logger) }
            // The pool's one connection is leased once PostgreSQL runs the busy statement.
            try await withClient(try database.adminConfig()) { adminClient in
                try await waitUntil(.seconds(15)) {
                    let rows = try await adminClient.query(
                        "SELECT count(*)::int FROM pg_stat_activity WHERE datname = \(database.name) AND query LIKE 'SELECT pg_sleep(8)%'",
                        logger: TestEnvironment.logger)
                    for try await count in rows.decode(Int.self) { return count == 1 }
                    return false
                }
            }
            let clock = ContinuousClock()
            let started = clock.now
            do {
                try await DatabaseBudget.$current.withValue(DatabaseBudget(maxWait: .milliseconds(400), watch: nil)) {
                    try await client.checkedQuery("SELECT 1", logger: TestEnvironment.logger)
                }
                Issue.record("leased a connection the other query holds")
            } catch {
                #expect(error is DatabaseWaitExceeded && isDatabaseUnavailable(error), "\(String(reflecting: error))")
            }
            // Ended by the budget, well before the busy query lets the connection go (had it waited
            // for that, the call would have worked): the upper bound leaves a loaded machine seconds.
            let waited = clock.now - started
            #expect(waited >= .milliseconds(350) && waited < .milliseconds(4000), "\(waited)")
            try await busy.value
            for _ in 0..<3 {
                let rows = try await DatabaseBudget.$current.withValue(DatabaseBudget(maxWait: .seconds(2), watch: nil)) {
                    try await client.checkedQuery("SELECT 7", decoding: Int32.self, logger: TestEnvironment.logger)
                }
                #expect(rows == [7])
            }
        }
    }

    /// PostgreSQL out of reach while a request waits for a connection: the wait ends as soon as the
    /// watch sees it, long before the budget's deadline.
    @Test(.timeLimit(.minutes(1))) func aWaitForAConnectionEndsWhenTheWatchSeesTheOutage() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        var nowhere = database.config(for: "social", poolSize: 2)
        nowhere.port = try RedisServer.freePort()
        let watch = try DatabaseWatch(database: nowhere, interval: .milliseconds(100), logger: TestEnvironment.logger)
        let watching = Task { try await watch.run() }
        defer { watching.cancel() }
        try await withClient(nowhere) { client in
            let clock = ContinuousClock()
            let started = clock.now
            do {
                try await DatabaseBudget.$current.withValue(DatabaseBudget(maxWait: .seconds(30), watch: watch)) {
                    try await client.checkedQuery("SELECT 1", logger: TestEnvironment.logger)
                }
                Issue.record("a query reached a port where nothing listens")
            } catch {
                #expect(isDatabaseUnavailable(error), "\(String(reflecting: error))")
            }
            #expect(clock.now - started < .seconds(3))
        }
    }
}

/// A count shared by concurrent tasks.
/// The step each worker last began.
private final class Steps: Sendable {
    private let steps = Mutex<[Int: String]>([:])
    func set(_ worker: Int, _ step: String) { steps.withLock { $0[worker] = step } }
    var all: [Int: String] { steps.withLock { $0 } }
}

private final class Tally: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
