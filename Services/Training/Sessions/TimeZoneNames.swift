import Logging
import PostgresNIO
import ServiceKit
import Synchronization

/// The IANA zone names PostgreSQL knows (days are worked out there), read once per process:
/// `pg_timezone_names` reads the server's whole zone database on every query, tens of milliseconds
/// of its time, which a settings change by anyone signed in must not cost each time. The list
/// changes only with the server's time zone data, when the services are restarted anyway.
final class TimeZoneNames: Sendable {
    private let names = Mutex<Set<String>?>(nil)

    func contains(_ name: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        if let known = names.withLock({ $0 }) { return known.contains(name) }
        var read: Set<String> = []
        for try await zone in try await connection.checkedQuery("SELECT name FROM pg_timezone_names", logger: logger).decode(String.self) { read.insert(zone) }
        names.withLock { $0 = read }
        return read.contains(name)
    }
}
