import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import PostgresNIO
import ServiceKit
import ServiceKitRedis

/// Someone a test calls a service as: what goes in `Authorization: Bearer`.
public protocol BearerHolder: Sendable {
    var token: String { get }
}

/// What every service's test environment shares: HTTP calls through the real router, calls that
/// really overlap, and plain SQL against the service's own schema.
public protocol ServiceHarness: Sendable {
    var client: any TestClientProtocol { get }
    var database: TestDatabase { get }
    /// The service whose schema `count` and `execute` run in.
    var serviceName: String { get }
}

extension ServiceHarness {
    @discardableResult
    public func call(
        _ method: HTTPRequest.Method, _ path: String, as user: (any BearerHolder)? = nil, json: Any? = nil, raw: ByteBuffer? = nil, headers extra: HTTPFields = [:]
    ) async throws -> APIReply {
        var headers = extra
        if let user { headers[.authorization] = "Bearer \(user.token)" }
        var body = raw
        if let json {
            body = ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]))
            headers[.contentType] = "application/json"
        }
        let response = try await client.execute(uri: path, method: method, headers: headers, body: body)
        return APIReply(status: response.status, headers: response.headers, body: response.body)
    }

    /// A call that really overlaps with others (see `ConcurrentClient`).
    public func concurrentCall(
        _ method: HTTPRequest.Method, _ path: String, as user: (any BearerHolder)?, json: Any? = nil, headers extra: [(String, String)] = []
    ) async throws -> HTTPResponse.Status {
        HTTPResponse.Status(code: try await concurrentReply(method, path, as: user, json: json, headers: extra).status)
    }

    public func concurrentReply(
        _ method: HTTPRequest.Method, _ path: String, as user: (any BearerHolder)?, json: Any? = nil, headers extra: [(String, String)] = []
    ) async throws -> ConcurrentClient.Reply {
        var headers = extra
        if let user { headers.append(("Authorization", "Bearer \(user.token)")) }
        return try await ConcurrentClient.send(port: client.port!, method.rawValue, path, headers: headers, json: json)
    }

    /// The first column of the first row of `sql`, an integer (a `count(*)`).
    public func count(_ sql: String) async throws -> Int {
        try await withClient(database.config(for: serviceName)) { client in
            var result = 0
            for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).decode(Int64.self) { result = Int(value) }
            return result
        }
    }

    public func execute(_ sql: String) async throws {
        try await withClient(database.config(for: serviceName)) { client in
            _ = try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).collect()
        }
    }

    /// One connection of the service's role, for `body` alone.
    public func withConnection(_ body: @escaping @Sendable (PostgresConnection) async throws -> Void) async throws {
        try await withClient(database.config(for: serviceName)) { client in
            try await client.withConnection { connection in try await body(connection) }
        }
    }

    /// Runs `statements` in a transaction that stays open while `body` runs, then commits it: a write
    /// in flight, for a test of what must wait for it.
    /// `thenBeforeCommit` runs in it after `body`.
    public func inOpenTransaction(
        _ statements: [String], while body: @escaping @Sendable () async throws -> Void, thenBeforeCommit later: [String] = []
    ) async throws {
        try await withClient(database.config(for: serviceName)) { client in
            try await client.withConnection { connection in
                _ = try await connection.query("BEGIN", logger: TestEnvironment.logger)
                for sql in statements { _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).collect() }
                try await body()
                for sql in later { _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).collect() }
                _ = try await connection.query("COMMIT", logger: TestEnvironment.logger)
            }
        }
    }

    /// What `write` answers when it runs while a deletion of `user`'s account holds the account
    /// (`holdAccountForDeletion`) and has left its tombstone, not yet committed: `write` must wait
    /// for the commit (this waits until something waits for a lock), and then find the tombstone.
    public func whileDeleting<Answer: Sendable>(_ user: UUID, _ write: @escaping @Sendable () async throws -> Answer) async throws -> Answer {
        let id = user.uuidString.lowercased()
        let (started, starting) = AsyncStream<Task<Answer, any Error>>.makeStream()
        try await inOpenTransaction([
            "SELECT pg_advisory_xact_lock(44224, hashtext(current_schema() || ':' || '\(id)'))",
            "INSERT INTO deleted_accounts (user_hash) VALUES (sha256(convert_to('\(id)', 'UTF8')))",
        ]) {
            starting.yield(Task { try await write() })
            starting.finish()
            try await awaitAccountHoldWait()
        }
        for await task in started { return try await task.value }
        throw CancellationError()
    }

    /// Waits until a connection to the service's database waits for an account's hold
    /// (`holdLiveAccount`: the advisory locks keyed 44224 and the account).
    public func awaitAccountHoldWait() async throws {
        try await waitUntil(.seconds(15)) {
            try await count("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 44224 AND objsubid = 2 AND NOT granted") > 0
        }
    }

    /// Waits until another connection to the service's database waits for a lock (a row's, an
    /// advisory one).
    public func awaitLockWait() async throws {
        try await waitUntil(.seconds(15)) {
            try await count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") > 0
        }
    }

    /// How PostgreSQL planned the prepared statement `name` while `body` ran it on one connection of
    /// the service's role: how many executions used the generic plan and how many were planned
    /// again for their parameters. A statement is prepared so that it is planned once; after its
    /// first five executions PostgreSQL keeps re-planning only when it costs the generic plan higher.
    public func plans(of name: String, _ body: @escaping @Sendable (PostgresConnection) async throws -> Void) async throws -> (generic: Int, custom: Int) {
        try await withClient(database.config(for: serviceName)) { client in
            try await client.withConnection { connection in
                try await body(connection)
                let rows = try await connection.query(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = \(name)", logger: TestEnvironment.logger)
                var plans = (generic: 0, custom: 0)
                for try await (generic, custom) in rows.decode((Int64, Int64).self) { plans = (Int(generic), Int(custom)) }
                return plans
            }
        }
    }
}

/// What a running service under test is reached and checked through.
public struct RunningService: Sendable {
    public let client: any TestClientProtocol
    public let issuer: TestIssuer
    public let database: TestDatabase
    public let config: ServiceConfig
    public let redis: RedisClient
}

/// Boots one service for a test as it runs in production: its own database (a copy of one its
/// `migrations` already ran in: `TestDatabase.migrated`) and Redis stream, access tokens from a test
/// issuer whose JWKS it fetches over HTTP, the application `build` makes (the service's own
/// `buildApplication`), waited for until `/healthz` answers.
public func runService<App: ApplicationProtocol>(
    _ name: String, environment: [String: String], migrations: @escaping @Sendable () throws -> [Migration], build: (ServiceConfig) throws -> App,
    _ body: @Sendable (RunningService) async throws -> Void
) async throws {
    let database = try await TestDatabase.migrated(service: name, migrations: migrations)
    try await database.dropping {
        try await runService(name, database: database, environment: environment, build: build, body)
    }
}

/// `runService` on a database another run of the service made, left as this run leaves it, and on
/// that run's event stream when `stream` names it: a start of the same service with other settings,
/// as a restart (or a replica started beside it) is.
public func runService<App: ApplicationProtocol>(
    _ name: String, database: TestDatabase, stream: String? = nil, environment: [String: String], build: (ServiceConfig) throws -> App,
    _ body: @Sendable (RunningService) async throws -> Void
) async throws {
    let issuer = TestIssuer()
    try await issuer.start()
    defer { issuer.stop() }
    var settings = ServiceConfig.test(
        name: name, database: database, redis: try TestEnvironment.redis(), stream: stream ?? TestEnvironment.uniqueName("events"), jwksURL: issuer.jwksURL,
        environment: environment)
    settings.tokens = issuer.tokenConfig
    let config = settings
    let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
    let app = try build(config)
    try await app.test(.live) { client in
        try await waitUntil(.seconds(20)) { try await client.execute(uri: "/healthz", method: .get).status == .ok }
        try await body(RunningService(client: client, issuer: issuer, database: database, config: config, redis: redis))
    }
    await redis.close()
}
