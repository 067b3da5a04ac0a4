import Foundation
import Logging
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens

/// Where the real PostgreSQL and Redis of a test run are. `scripts/test` starts both and exports
/// `TEST_DATABASE_URL` (a superuser URL) and `TEST_REDIS_URL`; without them tests fail, never skip.
public enum TestEnvironment {
    public struct Missing: Error, CustomStringConvertible {
        public var variable: String
        public var description: String {
            "\(variable) is not set: these tests need a real PostgreSQL and Redis. Run them with scripts/test, which starts both."
        }
    }

    public static func adminURL() throws -> URLComponents {
        StallHeartbeat.started
        guard let text = ProcessInfo.processInfo.environment["TEST_DATABASE_URL"], let url = URLComponents(string: text) else {
            throw Missing(variable: "TEST_DATABASE_URL")
        }
        return url
    }

    public static func redis() throws -> RedisConfiguration {
        StallHeartbeat.started
        guard let text = ProcessInfo.processInfo.environment["TEST_REDIS_URL"], let config = RedisConfiguration(url: text) else {
            throw Missing(variable: "TEST_REDIS_URL")
        }
        return config
    }

    public static let logger: Logger = {
        TestLogging.bootstrapped
        var logger = Logger(label: "test")
        logger.logLevel = ProcessInfo.processInfo.environment["TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
        return logger
    }()

    /// The background logger of test pools: PostgresNIO reports a failed connection attempt at `info`,
    /// and a test stuck waiting for a connection should say why.
    public static let poolLogger: Logger = {
        // Bootstrapped first: a logger made before the bootstrap keeps swift-log's default handler.
        TestLogging.bootstrapped
        var logger = Logger(label: "test-pool")
        logger.logLevel = min(.info, TestEnvironment.logger.logLevel)
        return logger
    }()

    /// A name no other test uses, for databases, streams and channels.
    public static func uniqueName(_ prefix: String) -> String {
        "\(prefix)_\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12))"
    }

    /// The package root, found from this file's path.
    public static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// The folder holding the built executables of this test run.
    public static var binDirectory: URL {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent(),
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().deletingLastPathComponent(),
            packageRoot.appendingPathComponent(".build/debug"),
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.appendingPathComponent("gateway").path) } ?? candidates.last!
    }
}

/// A fresh database of its own for one test, with the service roles provisioned in it, so that tests
/// run in parallel without seeing each other's rows.
public struct TestDatabase: Sendable {
    public let name: String
    public let host: String
    public let port: Int

    /// Creates the database and, for each service, its role and schema. PostgreSQL refuses concurrent
    /// `CREATE DATABASE` from one template and concurrent changes to one role, so creation is
    /// serialized in this process and retried across processes. Every attempt has a deadline: a
    /// connection pool that never hands out a connection would otherwise hold the turn, and every
    /// test waiting behind it, until CI's limit.
    public static func create(services: [String]) async throws -> TestDatabase {
        try await create(services: services, template: nil)
    }

    /// A database for one service whose migrations (`migrations`, as its definition lists them)
    /// already ran: a copy of a database this process migrated once for that service, so the
    /// service finds nothing to apply when it starts. Applying them for every test cost PostgreSQL
    /// about as much CPU as the tests themselves (nutrition's food table above all). The copy is
    /// provisioned as `create` provisions, since a database's own grants are not copied with it.
    public static func migrated(service: String, migrations: @escaping @Sendable () throws -> [Migration]) async throws -> TestDatabase {
        let template = try await MigratedTemplates.shared.template(for: service, migrations: migrations)
        return try await create(services: [service], template: template)
    }

    static func create(services: [String], template: String?) async throws -> TestDatabase {
        _ = TestDatabaseNames.sweep
        return try await DatabaseCreation.shared.run {
            var attempt = 0
            while true {
                do {
                    return try await withDeadline(.seconds(30), "creating a test database") { try await createOnce(services: services, template: template) }
                } catch {
                    attempt += 1
                    TestEnvironment.logger.warning("test database creation failed; retrying", metadata: ["attempt": "\(attempt)", "error": "\(String(reflecting: error))"])
                    if attempt >= 5 { throw DatabaseSetupError(detail: String(reflecting: error)) }
                    try await Task.sleep(for: .milliseconds(200 * attempt))
                }
            }
        }
    }

    struct DatabaseSetupError: Error, CustomStringConvertible {
        var detail: String
        var description: String { "cannot create a test database: \(detail)" }
    }

    static func createOnce(services: [String], template: String?) async throws -> TestDatabase {
        let name = TestDatabaseNames.make()
        let adminConfig = try serverAdminConfig()
        let (host, port) = (adminConfig.host, adminConfig.port)
        try await withClient(adminConfig) { client in
            let copying = template.map { " TEMPLATE \(quoteIdentifier($0))" } ?? ""
            try await client.query("CREATE DATABASE \(unescaped: quoteIdentifier(name))\(unescaped: copying)", logger: TestEnvironment.logger)
        }
        var databaseConfig = adminConfig
        databaseConfig.database = name
        let inDatabase = databaseConfig
        // Roles belong to the whole cluster while the provisioner's advisory lock belongs to one
        // database: provisionings in different new databases take turns here instead.
        try await DatabaseCreation.roles.run {
            try await withClient(inDatabase) { client in
                for service in services {
                    try await DatabaseProvisioner(admin: client, logger: TestEnvironment.logger)
                        .provision(role: service, password: service, schema: service, database: name)
                }
            }
        }
        return TestDatabase(name: name, host: host, port: port)
    }

    /// A superuser connection to the database `TEST_DATABASE_URL` names, where databases are made
    /// and dropped.
    static func serverAdminConfig() throws -> DatabaseConfig {
        let admin = try TestEnvironment.adminURL()
        let database = String(admin.path.dropFirst())
        return DatabaseConfig(
            host: admin.hostName ?? "127.0.0.1", port: admin.port ?? 5432, user: admin.user ?? "postgres", password: admin.password,
            database: database.isEmpty ? "postgres" : database, schema: "public", poolSize: 2)
    }

    /// The service's own connection settings: its role, its schema.
    public func config(for service: String, poolSize: Int = 8) -> DatabaseConfig {
        DatabaseConfig(host: host, port: port, user: service, password: service, database: name, schema: service, poolSize: poolSize)
    }

    /// A superuser connection to this database, for checks a service role may not make.
    public func adminConfig() throws -> DatabaseConfig {
        let admin = try TestEnvironment.adminURL()
        return DatabaseConfig(host: host, port: port, user: admin.user ?? "postgres", password: admin.password, database: name, schema: "public", poolSize: 2)
    }

    /// Drops the database, ending any connection a test left in it. `scripts/test` throws its
    /// PostgreSQL away, but a developer's long-lived one would keep every test's database (the
    /// food table in each of nutrition's) until its disk is full. A failure is reported, not
    /// thrown: it says nothing about the test that used the database.
    public func drop() async {
        do {
            try await withClient(try Self.serverAdminConfig()) { client in
                try await client.query("DROP DATABASE IF EXISTS \(unescaped: quoteIdentifier(name)) WITH (FORCE)", logger: TestEnvironment.logger)
            }
        } catch {
            TestEnvironment.logger.warning("a test database was not dropped", metadata: ["database": "\(name)", "error": "\(String(reflecting: error))"])
        }
    }

    /// Runs `body` with this database and drops it afterwards, whether `body` throws or not.
    public func dropping<T: Sendable>(after body: () async throws -> T) async throws -> T {
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        // In a task of its own, which a test's cancellation (its time limit) does not reach.
        let database = self
        await Task { await database.drop() }.value
        return try result.get()
    }
}

/// Runs `body` with a running `PostgresClient`, shutting it down afterwards. The client runs in a
/// task of its own rather than a child task: a pool that does not finish closing (PostgresNIO retries
/// a failing connect with back-off) is reported and left behind instead of hanging the test.
public func withClient<T: Sendable>(_ config: DatabaseConfig, _ body: @escaping @Sendable (PostgresClient) async throws -> T) async throws -> T {
    let client = PostgresClient(database: config, logger: TestEnvironment.poolLogger)
    let running = Task { await client.run() }
    let result: Result<T, any Error>
    do { result = .success(try await body(client)) } catch { result = .failure(error) }
    running.cancel()
    do {
        try await withDeadline(.seconds(10), "closing a PostgreSQL pool") { await running.value }
    } catch {
        TestEnvironment.logger.warning("a PostgreSQL pool did not close in time; left behind", metadata: ["database": "\(config.database)"])
    }
    return try result.get()
}

extension ServiceConfig {
    /// A service configuration for tests: an ephemeral port, the test database and Redis, its own stream.
    /// `environment` adds the service's own settings (they are read from `config.environment`).
    public static func test(
        name: String, database: TestDatabase, redis: RedisConfiguration, stream: String, jwksURL: String = "http://127.0.0.1:9/jwks.json",
        environment: [String: String] = [:]
    ) -> ServiceConfig {
        var env = EnvironmentReader(["APP_ENV": "test", "HTTP_PORT": "0", "LOG_LEVEL": "warning"].merging(environment) { $1 })
        var config = ServiceConfig(name: name, defaultPort: 0, reading: &env)
        config.database = database.config(for: name)
        config.redis = redis
        config.events.stream = stream
        config.events.claimIdle = .milliseconds(300)
        config.events.readBlock = .milliseconds(200)
        config.events.relayPollInterval = .milliseconds(500)
        config.tokens.jwksURL = jwksURL
        return config
    }
}

/// Test databases are named after the machine and the process that made them
/// (`t_<machine>_<pid>_<random>`), so that a later run can drop what a finished process left behind:
/// a database a test did not drop, and the migrated templates, which live as long as their process.
/// A developer's long-lived PostgreSQL would otherwise gain about a gigabyte with every run of the
/// suite. Databases of another machine or container sharing the server, and of a process still
/// running, stay; one still in use is never forced.
enum TestDatabaseNames {
    /// Where this process's id means something, as eight hex digits of FNV-1a over the machine's id
    /// (or its host name) and the process-id namespace: two containers on one host, each with its own
    /// process ids, may share both of the others. Stable from run to run, where Swift's `Hasher` is
    /// seeded anew in every process.
    static let machine: String = {
        let id = (try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8)).map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        let namespace = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid")) ?? ""
        var hash: UInt32 = 2_166_136_261
        for byte in ((id.flatMap { $0.isEmpty ? nil : $0 } ?? ProcessInfo.processInfo.hostName) + " " + namespace).utf8 {
            hash = (hash ^ UInt32(byte)) &* 16_777_619
        }
        return String(hash, radix: 16).leftPadded(to: 8)
    }()

    static var prefix: String { "t_\(machine)_" }

    static func make() -> String {
        "\(prefix)\(getpid())_\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(8))"
    }

    /// The process that made `name`, when this machine did.
    static func process(of name: String) -> pid_t? {
        guard name.hasPrefix(prefix) else { return nil }
        return name.dropFirst(prefix.count).split(separator: "_").first.flatMap { pid_t($0) }
    }

    /// Whether `name` was made on this machine by a process that has ended.
    static func isStale(_ name: String) -> Bool {
        guard let pid = process(of: name), pid != getpid() else { return false }
        // ESRCH: no such process. EPERM means one exists, of another user.
        return kill(pid, 0) == -1 && errno == ESRCH
    }

    /// Drops the databases of ended processes, once per process, beside the tests rather than
    /// before them. A failure is reported: the next run tries again.
    static let sweep: Task<Void, Never> = Task {
        do {
            let failed = try await dropStale().failed
            if !failed.isEmpty { TestEnvironment.logger.warning("test databases of ended runs were not dropped", metadata: ["databases": "\(failed)"]) }
        } catch {
            TestEnvironment.logger.warning("test databases of ended runs were not dropped", metadata: ["error": "\(String(reflecting: error))"])
        }
    }

    /// Drops every stale database (`isStale`); says which it dropped and which it could not (one
    /// another process was dropping at the same moment, say).
    static func dropStale() async throws -> (dropped: [String], failed: [String]) {
        try await withClient(try TestDatabase.serverAdminConfig()) { client in
            var stale: [String] = []
            let rows = try await client.query("SELECT datname FROM pg_database WHERE starts_with(datname, \(prefix))", logger: TestEnvironment.logger)
            for try await name in rows.decode(String.self) where isStale(name) { stale.append(name) }
            var outcome: (dropped: [String], failed: [String]) = ([], [])
            for name in stale {
                do {
                    // Not forced: a database someone is connected to is not stale after all.
                    _ = try await client.query("DROP DATABASE IF EXISTS \(unescaped: quoteIdentifier(name))", logger: TestEnvironment.logger).collect()
                    outcome.dropped.append(name)
                } catch {
                    outcome.failed.append(name)
                }
            }
            return outcome
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

/// Per service, the database this process migrated once, that `TestDatabase.migrated` copies.
actor MigratedTemplates {
    static let shared = MigratedTemplates()
    private var templates: [String: Task<String, any Error>] = [:]

    func template(for service: String, migrations: @escaping @Sendable () throws -> [Migration]) async throws -> String {
        let task = templates[service] ?? Task { try await Self.make(service: service, migrations: migrations) }
        templates[service] = task
        do {
            return try await task.value
        } catch {
            // The next test tries again rather than failing on this one's cause.
            if templates[service] == task { templates[service] = nil }
            throw error
        }
    }

    private static func make(service: String, migrations: @escaping @Sendable () throws -> [Migration]) async throws -> String {
        let database = try await TestDatabase.create(services: [service], template: nil)
        try await withClient(database.config(for: service, poolSize: 1)) { client in
            try await MigrationRunner(client: client, schema: service, migrations: try migrations(), logger: TestEnvironment.logger).run()
        }
        // PostgreSQL copies a database only when no session is in it: the pool's last connection
        // may still be closing on the server's side.
        try await withClient(try TestDatabase.serverAdminConfig()) { client in
            try await waitUntil(.seconds(15)) {
                var sessions: Int64 = 1
                let rows = try await client.query("SELECT count(*) FROM pg_stat_activity WHERE datname = \(database.name)", logger: TestEnvironment.logger)
                for try await count in rows.decode(Int64.self) { sessions = count }
                return sessions == 0
            }
        }
        return database.name
    }
}

/// Runs database creations a few at a time within this process. PostgreSQL copies several
/// databases from the template at once without trouble; one at a time, a run of some 250 tests
/// queued for longer than a test's time limit on a loaded two-core machine. Roles are shared by the
/// whole cluster, so provisionings take turns (`roles`).
actor DatabaseCreation {
    static let shared = DatabaseCreation(slots: 3)
    static let roles = DatabaseCreation(slots: 1)
    private var free: Int
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init(slots: Int) { free = slots }

    func run<T: Sendable>(_ work: @Sendable () async throws -> T) async throws -> T {
        // Actors are re-entrant across awaits, so a slot is taken and handed on explicitly.
        if free > 0 { free -= 1 } else { await withCheckedContinuation { waiters.append($0) } }
        defer {
            if waiters.isEmpty { free += 1 } else { waiters.removeFirst().resume() }
        }
        return try await work()
    }
}
