import Foundation
import Logging
import PostgresNIO
import ServiceKit
import Synchronization

/// The IANA zone names PostgreSQL knows (days are worked out there), read once and kept:
/// `pg_timezone_names` reads the server's whole zone database on every query, tens of milliseconds
/// of its time, which a settings change by anyone signed in must not cost each time. A name not
/// among them is looked for again once the list is an hour old: PostgreSQL's zone data changes
/// with its upgrades, which need not restart the services.
final class TimeZoneNames: Sendable {
    private struct Read {
        var names: Set<String>
        var at: ContinuousClock.Instant
    }
    private let read = Mutex<Read?>(nil)
    static let age = Duration.seconds(3600)

    func contains(_ name: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let now = ContinuousClock.now
        if let known = read.withLock({ $0 }), known.names.contains(name) || now - known.at < Self.age { return known.names.contains(name) }
        var names: Set<String> = []
        for try await zone in try await connection.checkedQuery("SELECT name FROM pg_timezone_names", logger: logger).decode(String.self) { names.insert(zone) }
        read.withLock { $0 = Read(names: names, at: now) }
        return names.contains(name)
    }
}
