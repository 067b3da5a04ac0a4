import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdTesting
import Models
import ServiceKit

/// Boots a service application exactly as `main` does, against the test database and Redis, and
/// checks the endpoints every process serves.
public func assertServiceServesHealth(name: String, build: (ServiceConfig) throws -> some ApplicationProtocol) async throws -> [String] {
    let database = try await TestDatabase.create(services: [name])
    let config = ServiceConfig.test(name: name, database: database, redis: try TestEnvironment.redis(), stream: TestEnvironment.uniqueName("events"))
    let app = try build(config)
    var failures = try await app.test(.live) { client -> [String] in
        var failures: [String] = []
        // Readiness waits for migrations; poll briefly.
        var ready = false
        for _ in 0..<100 {
            let response = try await client.execute(uri: "/readyz", method: .get)
            if response.status == .ok { ready = true; break }
            try await Task.sleep(for: .milliseconds(50))
        }
        if !ready { failures.append("\(name): /readyz never became ready") }
        let health = try await client.execute(uri: "/healthz", method: .get)
        if health.status != .ok { failures.append("\(name): /healthz is \(health.status)") }
        let metrics = try await client.execute(uri: "/metrics", method: .get)
        if !String(buffer: metrics.body).contains("events_outbox_backlog") { failures.append("\(name): /metrics lacks event bus metrics") }
        let missing = try await client.execute(uri: "/v1/nothing-here", method: .get, headers: [.requestID: "boot-test"])
        if missing.status != .notFound || missing.headers[.contentType] != Problem.mediaType || missing.headers[.requestID] != "boot-test" {
            failures.append("\(name): unknown path is not a 404 problem with the request id")
        }
        return failures
    }
    // The schema has the event bus tables and the migrations table.
    let tables = try await withClient(database.config(for: name)) { client in
        var names: [String] = []
        for try await table in try await client.query("SELECT table_name::text FROM information_schema.tables WHERE table_schema = \(name) ORDER BY 1", logger: TestEnvironment.logger).decode(String.self) {
            names.append(table)
        }
        return names
    }
    for table in ["inbox", "outbox", "schema_migrations"] where !tables.contains(table) {
        failures.append("\(name): schema lacks \(table)")
    }
    return failures
}
