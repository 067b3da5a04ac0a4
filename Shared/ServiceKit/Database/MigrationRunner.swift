import Crypto
import Foundation
import Logging
import PostgresNIO
import ServiceKitCore

/// One forward-only SQL migration.
public struct Migration: Sendable, Equatable {
    /// The file name without `.sql`, such as `0001_profiles`; files are applied in name order.
    public var name: String
    package var sql: String
    package var checksum: String { SHA256.hash(data: Data(sql.utf8)).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }

    public init(name: String, sql: String) {
        self.name = name
        self.sql = sql
    }

    /// Reads every `NNNN_what.sql` in a folder, in name order.
    public static func load(directory: URL) throws -> [Migration] {
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sql" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        return try files.map { Migration(name: $0.deletingPathExtension().lastPathComponent, sql: try String(contentsOf: $0, encoding: .utf8)) }
    }
}

package enum MigrationError: Error, CustomStringConvertible {
    case edited(name: String, schema: String, recorded: String, current: String)
    case missingFile(name: String, schema: String)
    case failed(name: String, schema: String, error: String)
    case noFolder(bundle: String)

    package var description: String {
        switch self {
        case .edited(let name, let schema, let recorded, let current):
            "migration \(name) was already applied to schema \(schema) but its file has changed (recorded checksum \(recorded.prefix(12)), file \(current.prefix(12))). Applied migrations are never edited: add a new migration instead."
        case .missingFile(let name, let schema):
            "migration \(name) is recorded in \(schema).schema_migrations but no file has that name; was it renamed or deleted?"
        case .failed(let name, let schema, let error):
            "migration \(name) failed in schema \(schema): \(error)"
        case .noFolder(let bundle):
            "the resource bundle \(bundle) holds no Migrations folder: the build is incomplete"
        }
    }
}

/// Applies a service's migrations into its own schema, once, even when replicas start together:
/// everything runs in one transaction holding an advisory lock keyed by the schema, and each applied
/// file is recorded with its checksum in `<schema>.schema_migrations`.
package struct MigrationRunner: Sendable {
    package let client: PostgresClient
    package let schema: String
    package let migrations: [Migration]
    package let logger: Logger

    package init(client: PostgresClient, schema: String, migrations: [Migration], logger: Logger) {
        self.client = client
        self.schema = schema
        self.migrations = migrations.sorted { $0.name < $1.name }
        self.logger = logger
    }

    /// Applies what is missing and returns the names applied now.
    @discardableResult
    package func run() async throws -> [String] {
        let schema = self.schema
        let logger = self.logger
        // A database that cannot be reached must stop start-up with a message, not hang it.
        let client = self.client
        try await withTimeout(.seconds(30), what: "connecting to the database for schema \(schema) (is it reachable with these credentials?)") {
            try await client.checkedQuery("SELECT 1", logger: logger)
        }
        return try await apply()
    }

    private func apply() async throws -> [String] {
        let schema = self.schema
        let migrations = self.migrations
        let logger = self.logger
        return try await client.transaction(logger: logger) { connection in
            // Index builds may take long and a replica may wait for another's lock: no statement
            // timeout here, but a bounded wait for locks held by running traffic.
            try await connection.checkedRun("SET LOCAL statement_timeout = 0", logger: logger)
            try await connection.checkedRun("SET LOCAL lock_timeout = '5min'", logger: logger)
            try await connection.checkedRun("SELECT pg_advisory_xact_lock(hashtext(\(schema + ".migrations")))", logger: logger)
            let table = "\(quoteIdentifier(schema)).schema_migrations"
            try await connection.checkedRun(
                """
                CREATE TABLE IF NOT EXISTS \(unescaped: table) (
                    name text PRIMARY KEY,
                    checksum text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """, logger: logger)
            var recorded: [String: String] = [:]
            var appliedAt: [String: Date] = [:]
            for try await (name, checksum, at) in try await connection.checkedQuery(
                "SELECT name, checksum, applied_at FROM \(unescaped: table)", logger: logger
            ).decode((String, String, Date).self) {
                recorded[name] = checksum
                appliedAt[name] = at
            }
            let known = Set(migrations.map(\.name))
            let strays = recorded.keys.sorted().filter { !known.contains($0) }
            if !strays.isEmpty {
                // Every file of this build applied, and more, applied after all of them: a newer
                // build's migrations, applied while this one still serves (a rollout in progress, a
                // pod of the previous release restarting, a rollback). Migrations only add what an
                // older build can live with, so it serves. With files of its own still to apply, or
                // a name it lacks applied before one of its own (a file renamed or deleted), it stops.
                let newestOwn = migrations.compactMap { appliedAt[$0.name] }.max() ?? .distantPast
                if let older = strays.first(where: { appliedAt[$0]! < newestOwn }) { throw MigrationError.missingFile(name: older, schema: schema) }
                guard migrations.allSatisfy({ recorded[$0.name] != nil }) else { throw MigrationError.missingFile(name: strays[0], schema: schema) }
                logger.warning(
                    "the schema has migrations this build has no file of: a newer build's; serving on it",
                    metadata: ["schema": "\(schema)", "migrations": "\(strays.joined(separator: ", "))"])
            }
            var applied: [String] = []
            for migration in migrations {
                if let checksum = recorded[migration.name] {
                    guard checksum == migration.checksum else {
                        throw MigrationError.edited(name: migration.name, schema: schema, recorded: checksum, current: migration.checksum)
                    }
                    continue
                }
                do {
                    try await connection.checkedRun("SET LOCAL search_path TO \(unescaped: quoteIdentifier(schema))", logger: logger)
                    for statement in SQLScript.statements(migration.sql) {
                        try await connection.checkedRun(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                } catch {
                    throw MigrationError.failed(name: migration.name, schema: schema, error: String(reflecting: error))
                }
                try await connection.checkedRun("INSERT INTO \(unescaped: table) (name, checksum) VALUES (\(migration.name), \(migration.checksum))", logger: logger)
                logger.info("applied migration", metadata: ["migration": "\(migration.name)", "schema": "\(schema)"])
                applied.append(migration.name)
            }
            return applied
        }
    }
}
