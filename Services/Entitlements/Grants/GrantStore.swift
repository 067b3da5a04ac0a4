import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Tiers given by administrators, kept with who gave them, why, and who took them back.
struct GrantStore: Sendable {
    func insert(user: UUID, tier: String, until: Date, reason: String, by admin: UUID, on connection: PostgresConnection, logger: Logger) async throws -> GrantRecord {
        let id = UUID()
        let rows = try await connection.checkedQuery(
            """
            INSERT INTO grants (id, user_id, tier, until, reason, granted_by) VALUES (\(id), \(user), \(tier), \(until), \(reason), \(admin))
            RETURNING created_at
            """, logger: logger)
        var created = Date()
        for try await value in rows.decode(Date.self) { created = value }
        return GrantRecord(id: id, tier: tier, until: until, reason: reason, grantedBy: admin, createdAt: created, revokedAt: nil)
    }

    /// Ends a grant of `user`; false when there is no such live grant.
    func revoke(_ id: UUID, of user: UUID, by admin: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            """
            UPDATE grants SET revoked_at = now(), revoked_by = \(admin)
            WHERE id = \(id) AND user_id = \(user) AND revoked_at IS NULL
            RETURNING 1
            """, logger: logger)
    }
}
