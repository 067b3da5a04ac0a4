import Foundation
import Logging
import PostgresNIO
import ServiceKitDatabase

/// Which coach may read which client's diary: from `invitation.accepted` until `client.unlinked`.
struct CoachLinkStore: Sendable {
    func link(coach: UUID, client: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "INSERT INTO coach_links (coach_id, client_id) VALUES (\(coach), \(client)) ON CONFLICT DO NOTHING", logger: logger)
    }

    func unlink(coach: UUID, client: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM coach_links WHERE coach_id = \(coach) AND client_id = \(client)", logger: logger)
    }

    func isLinked(coach: UUID, client: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM coach_links WHERE coach_id = \(coach) AND client_id = \(client)", logger: logger)
    }

    func forget(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM coach_links WHERE coach_id = \(user) OR client_id = \(user)", logger: logger)
    }
}
