import Foundation
import PostgresNIO
import ServiceKit
import TestSupport
import Testing

/// The pool's minimum: opened at start, kept while idle, and opened again when PostgreSQL drops them.
@Suite struct DatabasePoolTests {
    /// With a minimum below the pool (a burst opens one more) and equal to it (the services' default).
    @Test(arguments: [(poolSize: 4, minimum: 3), (poolSize: 3, minimum: 3)])
    func theMinimumIsOpenedAtStartAndReopenedAfterTheServerDropsIt(pool: (poolSize: Int, minimum: Int)) async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let config = { var config = database.config(for: "social", poolSize: pool.poolSize); config.minimumConnections = pool.minimum; return config }()
        let admin = try database.adminConfig()
        try await withClient(admin) { adminClient in
            @Sendable func open() async throws -> Int {
                let rows = try await adminClient.query(
                    "SELECT count(*)::int FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social'", logger: TestEnvironment.logger)
                for try await count in rows.decode(Int.self) { return count }
                return 0
            }
            @Sendable func waitFor(_ expected: Int, _ what: String) async throws {
                let deadline = ContinuousClock.now + .seconds(10)
                var count = try await open()
                while count != expected, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                    count = try await open()
                }
                #expect(count == expected, "\(what): \(count) connections open, expected \(expected)")
            }
            try await withClient(config) { client in
                try await waitFor(3, "at start, before any request")
                // A burst opens the rest of the pool; idle again, they all stay (the others for 60 s).
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<8 { group.addTask { try await client.query("SELECT pg_sleep(0.2)", logger: TestEnvironment.logger) } }
                    try await group.waitForAll()
                }
                #expect(try await open() == pool.poolSize)
                try await adminClient.query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social'", logger: TestEnvironment.logger)
                try await waitFor(3, "after PostgreSQL ended every connection")
                try await client.query("SELECT 1", logger: TestEnvironment.logger)
            }
        }
    }
}
