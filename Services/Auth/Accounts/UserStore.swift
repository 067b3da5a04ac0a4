import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// An account as stored.
struct UserRecord: Sendable {
    var id: UUID
    var email: String
    var emailVerified: Bool
    var passwordHash: String?
    var displayName: String?
    var roles: [Role]
    var disabledAt: Date?
    var createdAt: Date
    var lastSignInAt: Date?
    /// The address was proven by a mail link that kept no credential someone else had set (see
    /// migration 0005): what `ADMIN_EMAILS` needs.
    var emailProvenByMail: Bool

    var isDisabled: Bool { disabledAt != nil }

    /// The name a mail to the address greets: none until the address is proven. Whoever signs up
    /// chooses the name and may not own the address, and a mail must not carry their words to it.
    var nameForMail: String? { emailVerified ? displayName : nil }
}

extension UserRecord {
    /// The columns of `UserStore.columns`, in that order.
    typealias Columns = (UUID, String, Bool, String?, String?, [String], Date?, Date, Date?, Bool)

    init(_ row: Columns) {
        let (id, email, verified, hash, name, roles, disabledAt, createdAt, lastSignIn, provenByMail) = row
        self.init(
            id: id, email: email, emailVerified: verified, passwordHash: hash, displayName: name,
            roles: Role.ordered(roles.compactMap(Role.init(rawValue:))), disabledAt: disabledAt,
            createdAt: createdAt, lastSignInAt: lastSignIn, emailProvenByMail: provenByMail)
    }
}

/// The queries on `users` and `identities`. Every function runs on the caller's connection, so a
/// route composes them in one transaction with the events they cause.
struct UserStore: Sendable {
    static let columns = "id, email, email_verified, password_hash, display_name, roles, disabled_at, created_at, last_sign_in_at, email_proven_by_mail"

    static func decode(_ rows: PostgresRowSequence) async throws -> [UserRecord] {
        var users: [UserRecord] = []
        for try await row in rows.decode(UserRecord.Columns.self) {
            users.append(UserRecord(row))
        }
        return users
    }

    func find(id: UUID, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> UserRecord? {
        guard forUpdate else {
            for try await user in try await connection.checkedExecute(UserByID(id: id), logger: logger) { return user }
            return nil
        }
        return try await Self.decode(connection.checkedQuery("SELECT \(unescaped: Self.columns) FROM users WHERE id = \(id) FOR UPDATE", logger: logger)).first
    }

    /// `find(id:)` unlocked, prepared: a refresh and most signed-in routes read the account.
    struct UserByID: OneParameterStatement {
        static let name = "auth.user_by_id"
        static let sql = "SELECT \(UserStore.columns) FROM users WHERE id = $1"
        static let bindingDataTypes: [PostgresDataType] = [.uuid]
        typealias Row = UserRecord

        let id: UUID

        var parameter: UUID { id }

        func decodeRow(_ row: PostgresRow) throws -> UserRecord {
            let cells = row.makeRandomAccess()
            return UserRecord(
                (
                    try cells[0].decode(UUID.self), try cells[1].decode(String.self), try cells[2].decode(Bool.self), try cells[3].decode(String?.self),
                    try cells[4].decode(String?.self), try cells[5].decode([String].self), try cells[6].decode(Date?.self), try cells[7].decode(Date.self),
                    try cells[8].decode(Date?.self), try cells[9].decode(Bool.self)
                ))
        }
    }

    func find(email: String, forUpdate: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> UserRecord? {
        let lock = forUpdate ? " FOR UPDATE" : ""
        return try await Self.decode(
            connection.checkedQuery(
                "SELECT \(unescaped: Self.columns) FROM users WHERE email_normalized = \(EmailAddress.normalize(email))\(unescaped: lock)", logger: logger
            )
        ).first
    }

    /// Inserts the account; nil when the email is taken (the unique index decides, so two concurrent
    /// sign-ups with one address cannot both succeed).
    func insert(
        id: UUID = UUID(), email: String, emailVerified: Bool, passwordHash: String?, displayName: String?, roles: [Role],
        on connection: PostgresConnection, logger: Logger
    ) async throws -> UserRecord? {
        let trimmed = email.trimmingCharacters(in: .whitespacesAndNewlines)
        return try await Self.decode(
            connection.checkedQuery(
                """
                INSERT INTO users (id, email, email_normalized, email_verified, password_hash, display_name, roles)
                VALUES (\(id), \(trimmed), \(EmailAddress.normalize(email)), \(emailVerified), \(passwordHash), \(displayName), \(roles.map(\.rawValue)))
                ON CONFLICT (email_normalized) DO NOTHING
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
        ).first
    }

    func providers(of userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        var providers: [String] = []
        for try await provider in try await connection.checkedQuery(
            "SELECT provider FROM identities WHERE user_id = \(userID) ORDER BY provider", logger: logger
        ).decode(String.self) {
            providers.append(provider)
        }
        return providers
    }

    func setRoles(_ roles: [Role], of userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE users SET roles = \(Role.ordered(roles).map(\.rawValue)) WHERE id = \(userID)", logger: logger)
    }

    func setPassword(hash: String, of userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE users SET password_hash = \(hash) WHERE id = \(userID)", logger: logger)
    }

    /// `byMail`: proven through a mail link with no credential kept that someone else set (what
    /// `ADMIN_EMAILS` asks for); a provider's claim is not.
    func markVerified(_ userID: UUID, byMail: Bool, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE users SET email_verified = true, email_proven_by_mail = email_proven_by_mail OR \(byMail) WHERE id = \(userID)", logger: logger)
    }

    /// Takes from the account everything whoever set it up before its address was proven could
    /// still use or show: the password, every Apple and Google sign-in, the name they chose, every
    /// outstanding mail link. Sessions are ended by the caller (`SessionStore.endAll`).
    func removeCredentials(of userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE users SET password_hash = NULL, display_name = NULL WHERE id = \(userID)", logger: logger)
        try await connection.checkedRun("DELETE FROM identities WHERE user_id = \(userID)", logger: logger)
        try await connection.checkedRun("UPDATE email_tokens SET used_at = now() WHERE user_id = \(userID) AND used_at IS NULL", logger: logger)
    }

    /// The name chosen by whoever set the account up, when its address's owner first proves it by a
    /// reset (the password and sessions are replaced by the reset itself).
    func forgetDisplayName(of userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE users SET display_name = NULL WHERE id = \(userID)", logger: logger)
    }

    func setDisplayName(_ name: String, of userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE users SET display_name = \(name) WHERE id = \(userID)", logger: logger)
    }

    func recordSignIn(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE users SET last_sign_in_at = now() WHERE id = \(userID)", logger: logger)
    }

    func setDisabled(_ disabled: Bool, userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE users SET disabled_at = CASE WHEN \(disabled) THEN coalesce(disabled_at, now()) ELSE NULL END WHERE id = \(userID)", logger: logger
        )
    }

    /// Records that ADMIN_EMAILS' grant of admin to the account is used up (given, or waived by a
    /// demotion); true when it was not before.
    func recordConfiguredAdminGrant(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("INSERT INTO configured_admin_grants (user_id) VALUES (\(userID)) ON CONFLICT DO NOTHING RETURNING true", logger: logger)
    }

    /// The account and everything hanging off it (identities, sessions, refresh and mail tokens go
    /// by cascade); the mail to the address, queued or sent, goes too. The account's tombstone
    /// stays, as in every service, and the answers kept for its retries go (`recordDeletedAccount`):
    /// a keyed request its token still sends waits for this transaction, then finds the tombstone.
    func delete(_ user: UserRecord, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.holdAccountForDeletion(user.id, logger: logger)
        // Mail goes to the stored address exactly; lowered on both sides as the index is.
        try await connection.checkedRun("DELETE FROM mail_outbox WHERE lower(recipient) = lower(\(user.email))", logger: logger)
        try await connection.checkedRun("DELETE FROM users WHERE id = \(user.id)", logger: logger)
        try await connection.recordDeletedAccount(user.id, logger: logger)
    }

    // MARK: identities

    /// The account an identity signs in to, held with the identity until the transaction ends: a
    /// takeover, a reset or a disable that committed first is seen (the identity gone, the account
    /// as it now is), and one that comes after waits, so no session is made past it.
    func user(provider: String, subject: String, on connection: PostgresConnection, logger: Logger) async throws -> UserRecord? {
        try await Self.decode(
            connection.checkedQuery(
                """
                SELECT \(unescaped: Self.columns.split(separator: ",").map { "u." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", "))
                FROM identities i JOIN users u ON u.id = i.user_id
                WHERE i.provider = \(provider) AND i.subject = \(subject)
                FOR NO KEY UPDATE OF u FOR KEY SHARE OF i
                """, logger: logger)
        ).first
    }

    /// `proven`: the address was verified (by the provider, or already on the account) when the
    /// identity was linked. `withPassword`: linked by showing the account's password, not on the
    /// provider's word for the address.
    func link(
        provider: String, subject: String, email: String?, proven: Bool, withPassword: Bool = false, to userID: UUID, on connection: PostgresConnection, logger: Logger
    ) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO identities (provider, subject, user_id, email, linked_unproven, linked_with_password)
            VALUES (\(provider), \(subject), \(userID), \(email), \(!proven), \(withPassword))
            """, logger: logger)
    }

    /// Removes the account's provider sign-ins linked with its password, which a password change ends.
    func unlinkLinkedWithPassword(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM identities WHERE user_id = \(userID) AND linked_with_password", logger: logger)
    }

    /// Removes the account's provider sign-ins that a password reset ends: those linked before anyone
    /// had proven its address, and those linked with the password the reset replaces.
    func unlinkOnReset(_ userID: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM identities WHERE user_id = \(userID) AND (linked_unproven OR linked_with_password)", logger: logger)
    }

    /// A page of accounts for admins, newest first, optionally filtered by an email prefix or a
    /// display-name fragment in any case (lowered under ICU's root locale, as Swift lowers the query:
    /// the C locale's `lower` keeps letters outside ASCII). Returns `limit + 1` rows (the extra one
    /// says there is a next page).
    func search(query: String?, limit: Int, after cursor: UserCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [UserRecord] {
        // A prefix is no address yet: lowered like one, and canonical once it is whole.
        let needle = query.map { EmailAddress($0)?.canonical ?? $0.trimmingCharacters(in: .whitespacesAndNewlines).lowercased() } ?? ""
        let pattern = needle.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_")
        return try await Self.decode(
            connection.checkedQuery(
                """
                SELECT \(unescaped: Self.columns) FROM users
                WHERE (\(needle) = '' OR email_normalized LIKE \(pattern + "%") OR lower(coalesce(display_name, '') COLLATE "und-x-icu") LIKE \("%" + pattern + "%"))
                  AND (\(cursor == nil) OR (created_at, id) < (\(cursor?.createdAt ?? Date()), \(cursor?.id ?? UUID())))
                ORDER BY created_at DESC, id DESC
                LIMIT \(limit + 1)
                """, logger: logger))
    }
}

/// The sort key of the admin user list: creation time and id of the last account of a page.
struct UserCursor: Codable, Sendable {
    var createdAt: Date
    var id: UUID

    enum CodingKeys: String, CodingKey { case createdAt = "c", id = "i" }
}

extension Role {
    /// Roles in the architecture's order, without duplicates: tokens and responses list them alike.
    static func ordered(_ roles: some Sequence<Role>) -> [Role] {
        let set = Set(roles)
        return Role.allCases.filter(set.contains)
    }
}
