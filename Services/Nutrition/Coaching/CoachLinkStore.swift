import Foundation
import Logging
import PostgresNIO
import ServiceKitDatabase

/// Which coach may read which client's diary: from `invitation.accepted` until `client.unlinked`,
/// ordered by when each happened, not by when its event arrived.
struct CoachLinkStore: Sendable {
    /// Links them, unless the link ended after `at` (this acceptance is older than its end).
    func link(coach: UUID, client: UUID, at: Date, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO coach_links (coach_id, client_id, linked_at)
            SELECT \(coach), \(client), \(at)
            WHERE NOT EXISTS (SELECT 1 FROM coach_unlinks WHERE coach_id = \(coach) AND client_id = \(client) AND unlinked_at >= \(at))
            ON CONFLICT (coach_id, client_id) DO UPDATE SET linked_at = greatest(coach_links.linked_at, EXCLUDED.linked_at)
            """, logger: logger)
    }

    /// Ends a link made before `at`, and remembers when.
    func unlink(coach: UUID, client: UUID, at: Date, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "DELETE FROM coach_links WHERE coach_id = \(coach) AND client_id = \(client) AND linked_at <= \(at)", logger: logger)
        try await connection.checkedRun(
            """
            INSERT INTO coach_unlinks (coach_id, client_id, unlinked_at) VALUES (\(coach), \(client), \(at))
            ON CONFLICT (coach_id, client_id) DO UPDATE SET unlinked_at = greatest(coach_unlinks.unlinked_at, EXCLUDED.unlinked_at)
            """, logger: logger)
    }

    func isLinked(coach: UUID, client: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM coach_links WHERE coach_id = \(coach) AND client_id = \(client)", logger: logger)
    }

    func forget(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM coach_links WHERE coach_id = \(user) OR client_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM coach_unlinks WHERE coach_id = \(user) OR client_id = \(user)", logger: logger)
    }
}
