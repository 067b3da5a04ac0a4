import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// An account's roles and status as auth's events last told them (`account_standing`).
struct AccountStanding: Sendable {
    /// Nil until a `user.roles_changed` arrived: the roles are then those of the account's tokens.
    var roles: [String]?
    var disabled: Bool
    var deleted: Bool
}

/// The `account_standing` table: what this service checks an admin's token against, since it has no
/// synchronous way to ask auth.
struct AccountStandingStore: Sendable {
    func find(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> AccountStanding {
        let rows = try await connection.checkedQuery(
            """
            SELECT (SELECT roles FROM account_standing WHERE user_id = \(user)),
                   coalesce((SELECT disabled FROM account_standing WHERE user_id = \(user)), false),
                   EXISTS (SELECT 1 FROM deleted_accounts WHERE user_hash = sha256(convert_to(\(user.uuidString.lowercased()), 'UTF8')))
            """, logger: logger)
        var standing = AccountStanding(roles: nil, disabled: false, deleted: false)
        for try await (roles, disabled, deleted) in rows.decode(([String]?, Bool, Bool).self) {
            standing = AccountStanding(roles: roles, disabled: disabled, deleted: deleted)
        }
        return standing
    }

    /// `user.roles_changed`: the complete new set (the handler applies only the latest event).
    func rolesChanged(_ user: UUID, roles: [Role], at time: Date, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO account_standing (user_id, roles, roles_changed_at) VALUES (\(user), \(roles.map(\.rawValue)), \(time))
            ON CONFLICT (user_id) DO UPDATE SET roles = EXCLUDED.roles, roles_changed_at = EXCLUDED.roles_changed_at
            """, logger: logger)
    }

    /// `user.status_changed` (the handler applies only the latest event).
    func statusChanged(_ user: UUID, disabled: Bool, at time: Date, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO account_standing (user_id, disabled, status_changed_at) VALUES (\(user), \(disabled), \(time))
            ON CONFLICT (user_id) DO UPDATE SET disabled = EXCLUDED.disabled, status_changed_at = EXCLUDED.status_changed_at
            """, logger: logger)
    }
}

extension Entitlements {
    /// Refuses the caller unless they are an admin *now*, as auth's events last said: a demoted,
    /// disabled or deleted admin's access token lives on for up to 15 minutes, and is refused here
    /// once the event arrives, as auth's `liveAdmin` refuses it there. An account whose roles no
    /// event has named since this service began keeping them is taken at its token's word: any
    /// change after the token was issued would have come as an event.
    func liveAdmin(_ context: AuthenticatedContext) async throws {
        try context.require(anyOf: .admin)
        let standings = AccountStandingStore()
        let standing = try await postgres.withConnectionOnItsLoop { connection in
            try await standings.find(context.caller.userID, on: connection, logger: context.logger)
        }
        if standing.deleted { throw APIError.unauthorized("This account no longer exists.", code: "session_revoked") }
        if standing.disabled { throw APIError(.forbidden, code: "account_disabled", detail: "This account is disabled. Contact support.") }
        if let roles = standing.roles, !roles.contains(Role.admin.rawValue) { throw APIError.forbidden("This needs the admin role.") }
    }
}
