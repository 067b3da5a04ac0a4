import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// An account as this service knows it from auth's and social's events.
struct AccountRecord: Sendable {
    var userID: UUID
    var email: String
    var emailVerified: Bool
    /// The provider (`apple`, `google`) that vouched for the address when auth verified it; nil when
    /// a mailed link proved it.
    var emailVouchedBy: String?
    /// The profile's name (social), or the account's (auth) until the profile says otherwise.
    var displayName: String?
    var avatarURL: String?
    var roles: [String]
    var lastSignInAt: Date?
}

/// The `accounts` table: what the events said about each account. Every function runs on the
/// caller's connection.
struct AccountDirectory: Sendable {
    func find(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> AccountRecord? {
        let rows = try await connection.checkedQuery(
            """
            SELECT user_id, email, email_verified, email_vouched_by, display_name, avatar_url, roles, last_sign_in_at FROM accounts WHERE user_id = \(userID)
            """, logger: logger)
        for try await (id, email, verified, vouchedBy, name, avatar, roles, signedIn) in rows.decode((UUID, String, Bool, String?, String?, String?, [String], Date?).self) {
            return AccountRecord(
                userID: id, email: email, emailVerified: verified, emailVouchedBy: vouchedBy, displayName: name, avatarURL: avatar, roles: roles, lastSignInAt: signedIn)
        }
        return nil
    }

    /// The account as registered; `keepingName` false leaves out the name the maker chose.
    func registered(_ event: UserRegistered, keepingName: Bool, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO accounts (user_id, email, email_normalized, display_name)
            SELECT \(event.userID), \(event.email), \(EmailAddress.normalize(event.email)), \(keepingName ? event.displayName : nil)
            WHERE hold_live_account(\(event.userID))
            ON CONFLICT (user_id) DO UPDATE SET email = excluded.email, email_normalized = excluded.email_normalized,
                display_name = coalesce(accounts.display_name, excluded.display_name)
            """, logger: logger)
    }

    /// The account as proven, made here if `user.registered` has not arrived yet (two processes take
    /// turns at the stream, and a failed handler is retried after later events): the registration's
    /// own write then keeps the proof.
    func verified(_ event: UserEmailVerified, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO accounts (user_id, email, email_normalized, email_verified, email_vouched_by)
            SELECT \(event.userID), \(event.email), \(EmailAddress.normalize(event.email)), true, \(event.vouchedBy)
            WHERE hold_live_account(\(event.userID))
            ON CONFLICT (user_id) DO UPDATE SET email_verified = true, email = excluded.email, email_normalized = excluded.email_normalized,
                email_vouched_by = excluded.email_vouched_by
            """, logger: logger)
    }

    /// The account's roles; false when `user.registered` has not made the account here (this event
    /// cannot: it has no address).
    func rolesChanged(_ event: UserRolesChanged, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("UPDATE accounts SET roles = \(event.roles.map(\.rawValue)) WHERE user_id = \(event.userID) RETURNING 1", logger: logger)
    }

    /// Whether the roles auth last gave the account, as known here, hold `coach`.
    func isKnownCoach(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM accounts WHERE user_id = \(userID) AND 'coach' = ANY (roles)", logger: logger)
    }

    /// Whether auth's latest roles event here left the account without `coach`; false for one no
    /// roles event has named.
    func isKnownNotCoach(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            """
            SELECT 1 FROM accounts a JOIN event_latest l ON l.subject = a.user_id AND l.topic = 'roles'
            WHERE a.user_id = \(userID) AND NOT ('coach' = ANY (a.roles))
            """, logger: logger)
    }

    func signedIn(_ userID: UUID, at time: Date, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE accounts SET last_sign_in_at = greatest(coalesce(last_sign_in_at, \(time)), \(time)) WHERE user_id = \(userID)", logger: logger)
    }

    /// The account's name and avatar, as the event has them whole (a name cleared is cleared here:
    /// the address's local part stands in); false when `user.registered` has not made the account here.
    func profileUpdated(_ event: ProfileUpdated, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            "UPDATE accounts SET display_name = \(event.displayName), avatar_url = \(event.avatarURL) WHERE user_id = \(event.userID) RETURNING 1",
            logger: logger)
    }

    /// The name and avatar the account's maker showed, once the address's owner has proven it: the
    /// profile is blank until its owner fills it (`profile.updated`).
    func forgetProfile(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE accounts SET display_name = NULL, avatar_url = NULL WHERE user_id = \(userID)", logger: logger)
    }

    /// The account and a tombstone in its place (`deleted_accounts`).
    func delete(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM accounts WHERE user_id = \(userID)", logger: logger)
        try await connection.recordDeletedAccount(userID, logger: logger)
    }

    func isDeleted(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.isDeletedAccount(userID, logger: logger)
    }
}

/// An event about an account this service has not heard of yet (its `user.registered` is still to
/// come): the handler fails, nothing of it is kept, and the event is retried after the others.
struct AccountNotYetKnown: EventNotReadyYet, CustomStringConvertible {
    var userID: UUID
    var description: String { "account \(userID) not known yet: its user.registered is still to come" }
}
