import Foundation
import PostgresNIO
import ServiceKitDatabase
import Testing

@testable import TestSupport

/// A developer's own PostgreSQL keeps what a test run leaves: the next run drops the databases of
/// processes of this machine that have ended, and nothing else.
@Suite struct TestDatabaseTests {
    /// `provision` sets the password the service's URL carries, and without one touches none: a new
    /// role gets none (not one spelt like its name), and an existing role keeps its own.
    @Test func provisioningWithoutAPasswordSetsNone() async throws {
        let database = try await TestDatabase.create(services: [])
        try await database.dropping {
            let role = TestEnvironment.uniqueName("provisioned").lowercased()
            try await withClient(try database.adminConfig()) { client in
                let provisioner = DatabaseProvisioner(admin: client, logger: TestEnvironment.logger)
                @Sendable func hasPassword() async throws -> Bool? {
                    try await client.query("SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = \(role)", logger: TestEnvironment.logger)
                        .decode(Bool.self).first { _ in true }
                }
                try await provisioner.provision(role: role, password: nil, schema: role, database: database.name)
                #expect(try await hasPassword() == false)
                try await provisioner.provision(role: role, password: "chosen by hand", schema: role, database: database.name)
                try await provisioner.provision(role: role, password: nil, schema: role, database: database.name)
                #expect(try await hasPassword() == true)
                try await client.query("DROP OWNED BY \(unescaped: quoteIdentifier(role))", logger: TestEnvironment.logger)
                try await client.query("DROP ROLE \(unescaped: quoteIdentifier(role))", logger: TestEnvironment.logger)
            }
        }
    }

    @Test func aLaterRunDropsOnlyTheDatabasesOfEndedProcesses() async throws {
        // A process that has ended: its id is free until the system hands it out again.
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/true")
        try ended.run()
        ended.waitUntilExit()
        let suffix = UUID().uuidString.lowercased().prefix(8)
        let stale = "\(TestDatabaseNames.prefix)\(ended.processIdentifier)_\(suffix)"
        let ours = "\(TestDatabaseNames.prefix)\(getpid())_\(suffix)"
        let otherMachine = "t_\(TestDatabaseNames.machine == "00000000" ? "00000001" : "00000000")_\(ended.processIdentifier)_\(suffix)"
        #expect(TestDatabaseNames.isStale(stale) && !TestDatabaseNames.isStale(ours) && !TestDatabaseNames.isStale(otherMachine))

        let admin = try TestDatabase.serverAdminConfig()
        let outcome: Result<Set<String>, any Error>
        do {
            try await withClient(admin) { client in
                for name in [stale, ours, otherMachine] {
                    _ = try await client.query("CREATE DATABASE \(unescaped: quoteIdentifier(name))", logger: TestEnvironment.logger).collect()
                }
            }
            _ = try await TestDatabaseNames.dropStale()
            outcome = .success(
                try await withClient(admin) { client in
                    var names: [String] = []
                    let rows = try await client.query("SELECT datname FROM pg_database WHERE datname = ANY(\([stale, ours, otherMachine]))", logger: TestEnvironment.logger)
                    for try await name in rows.decode(String.self) { names.append(name) }
                    return Set(names)
                })
        } catch {
            outcome = .failure(error)
        }
        // No sweep would ever drop the other machine's: whatever happened, these go.
        try await withClient(admin) { client in
            for name in [stale, ours, otherMachine] {
                _ = try await client.query("DROP DATABASE IF EXISTS \(unescaped: quoteIdentifier(name))", logger: TestEnvironment.logger).collect()
            }
        }
        #expect(try outcome.get() == [ours, otherMachine])
    }
}
