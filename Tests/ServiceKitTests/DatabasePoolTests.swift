import Foundation
import PostgresNIO
import ServiceKit
import TestSupport
import Testing

/// The pool's minimum: opened at start, kept while idle, and opened again when PostgreSQL drops them.
@Suite struct DatabasePoolTests {
    @Test func theMinimumIsOpenedAtStartAndReopenedAfterTheServerDropsIt() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let config = { var config = database.config(for: "social", poolSize: 4); config.minimumConnections = 3; return config }()
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
                // A burst opens the fourth; idle again, the three stay.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<8 { group.addTask { try await client.query("SELECT pg_sleep(0.2)", logger: TestEnvironment.logger) } }
                    try await group.waitForAll()
                }
                #expect(try await open() == 4)
                try await adminClient.query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(database.name) AND usename = 'social'", logger: TestEnvironment.logger)
                try await waitFor(3, "after PostgreSQL ended every connection")
                try await client.query("SELECT 1", logger: TestEnvironment.logger)
            }
        }
    }
}
