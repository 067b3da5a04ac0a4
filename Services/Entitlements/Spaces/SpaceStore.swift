import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// A space as one member sees it: the space, its owner, and the member's own permission.
struct SpaceRecord: Sendable {
    var id: UUID
    var name: String
    var createdAt: Date
    var updatedAt: Date
    var pendingOwnerID: UUID?
    var ownerID: UUID
    var permission: SpacePermission
    var joinedAt: Date
}

/// A member, or an invitation by address waiting for its account (`userID` nil, `email` set).
struct SpaceMemberRecord: Sendable {
    var userID: UUID?
    var email: String?
    var permission: SpacePermission
    /// When they joined, or for an invitation when it was made.
    var since: Date
    /// An account invited by its id, not a member until it accepts.
    var invited = false
    var isPending: Bool { userID == nil || invited }
}

/// An invitation (by address, or to the account) as its addressee sees it: the space and the permission offered.
struct SpaceInvitationRecord: Sendable {
    var spaceID: UUID
    var name: String
    var permission: SpacePermission
    var invitedAt: Date
}

/// The position in "my spaces" (newest first).
struct SpaceCursor: Codable, Sendable {
    var createdAt: Date
    var id: UUID
    enum CodingKeys: String, CodingKey { case createdAt = "c", id = "i" }
}

/// The queries on `spaces`, `space_members`, `space_invitations` and `space_account_invitations`. Every function runs on the
/// caller's connection, so a route composes them in one transaction; routes that change a space
/// call `lock` first.
struct SpaceStore: Sendable {
    /// A space with the owner and one member's permission; `m` is the member's row.
    static let select = """
        SELECT s.id, s.name, s.created_at, s.updated_at, s.pending_owner_id, o.user_id, m.permission, m.joined_at
        FROM space_members m
        JOIN spaces s ON s.id = m.space_id
        JOIN space_members o ON o.space_id = s.id AND o.permission = 'owner'
        """

    typealias Row = (UUID, String, Date, Date, UUID?, UUID, String, Date)

    static func decode(_ rows: PostgresRowSequence) async throws -> [SpaceRecord] {
        var spaces: [SpaceRecord] = []
        for try await row in rows.decode(Row.self) {
            let (id, name, created, updated, pendingOwner, owner, permission, joined) = row
            spaces.append(
                SpaceRecord(
                    id: id, name: name, createdAt: created, updatedAt: updated, pendingOwnerID: pendingOwner, ownerID: owner,
                    permission: SpacePermission(rawValue: permission) ?? .viewer, joinedAt: joined))
        }
        return spaces
    }

    /// Locks the space's row for the rest of the transaction: changes of one space's members and
    /// ownership run one after the other. False if there is no such space.
    ///
    /// A statement of its own, before `find`: in READ COMMITTED, a statement that waited for the lock
    /// re-reads the locked row but not the rows joined to it, so the membership is read afterwards
    /// by a new statement, which sees what the transaction it waited for committed.
    func lock(_ id: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM spaces WHERE id = \(id) FOR UPDATE", logger: logger)
    }

    /// The space as `member` sees it; nil when they are not a member (or there is no such space).
    func find(_ id: UUID, member: UUID, on connection: PostgresConnection, logger: Logger) async throws -> SpaceRecord? {
        try await Self.decode(connection.checkedQuery("\(unescaped: Self.select) WHERE s.id = \(id) AND m.user_id = \(member)", logger: logger)).first
    }

    /// A page of the spaces `member` belongs to (owned and shared), newest first.
    func list(member: UUID, limit: Int, after cursor: SpaceCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [SpaceRecord] {
        try await Self.decode(
            connection.checkedQuery(
                """
                \(unescaped: Self.select)
                WHERE m.user_id = \(member)
                  AND (\(cursor == nil) OR (s.created_at, s.id) < (\(cursor?.createdAt ?? Date()), \(cursor?.id ?? UUID())))
                ORDER BY s.created_at DESC, s.id DESC
                LIMIT \(limit + 1)
                """, logger: logger))
    }

    /// A new space with `owner` as its owner.
    func create(name: String, owner: UUID, on connection: PostgresConnection, logger: Logger) async throws -> UUID {
        let id = UUID()
        try await connection.checkedRun("INSERT INTO spaces (id, name) VALUES (\(id), \(name))", logger: logger)
        try await connection.checkedRun(
            "INSERT INTO space_members (space_id, user_id, permission) VALUES (\(id), \(owner), 'owner')", logger: logger)
        return id
    }

    func rename(_ id: UUID, to name: String, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE spaces SET name = \(name), updated_at = now() WHERE id = \(id)", logger: logger)
    }

    /// The space, its members and invitations (cascade).
    func delete(_ id: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM spaces WHERE id = \(id)", logger: logger)
    }

    // MARK: members

    /// The members, the owner first then by joining, and after them the invitations by address, then
    /// those to accounts.
    func members(of space: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [SpaceMemberRecord] {
        var members: [SpaceMemberRecord] = []
        let rows = try await connection.checkedQuery(
            """
            SELECT user_id, permission, joined_at FROM space_members WHERE space_id = \(space)
            ORDER BY (permission = 'owner') DESC, joined_at, user_id
            """, logger: logger)
        for try await (user, permission, joined) in rows.decode((UUID, String, Date).self) {
            members.append(SpaceMemberRecord(userID: user, email: nil, permission: SpacePermission(rawValue: permission) ?? .viewer, since: joined))
        }
        let invitations = try await connection.checkedQuery(
            "SELECT email_normalized, permission, created_at FROM space_invitations WHERE space_id = \(space) ORDER BY created_at, email_normalized",
            logger: logger)
        for try await (email, permission, created) in invitations.decode((String, String, Date).self) {
            members.append(SpaceMemberRecord(userID: nil, email: email, permission: SpacePermission(rawValue: permission) ?? .viewer, since: created))
        }
        let accounts = try await connection.checkedQuery(
            "SELECT user_id, permission, created_at FROM space_account_invitations WHERE space_id = \(space) ORDER BY created_at, user_id", logger: logger)
        for try await (user, permission, created) in accounts.decode((UUID, String, Date).self) {
            members.append(
                SpaceMemberRecord(userID: user, email: nil, permission: SpacePermission(rawValue: permission) ?? .viewer, since: created, invited: true))
        }
        return members
    }

    /// One member's row, if they are a member.
    func member(_ user: UUID, of space: UUID, on connection: PostgresConnection, logger: Logger) async throws -> SpaceMemberRecord? {
        let rows = try await connection.checkedQuery(
            "SELECT permission, joined_at FROM space_members WHERE space_id = \(space) AND user_id = \(user)", logger: logger)
        var found: SpaceMemberRecord?
        for try await (permission, joined) in rows.decode((String, Date).self) {
            found = SpaceMemberRecord(userID: user, email: nil, permission: SpacePermission(rawValue: permission) ?? .viewer, since: joined)
        }
        return found
    }

    /// Adds a member; false if they already are one.
    func addMember(_ user: UUID, to space: UUID, permission: SpacePermission, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            """
            INSERT INTO space_members (space_id, user_id, permission) VALUES (\(space), \(user), \(permission.rawValue))
            ON CONFLICT (space_id, user_id) DO NOTHING RETURNING 1
            """, logger: logger)
    }

    /// Invites an address (with an account or not); false if it is already invited to the space.
    func invite(_ emailNormalized: String, to space: UUID, permission: SpacePermission, by inviter: UUID, on connection: PostgresConnection, logger: Logger)
        async throws -> Bool
    {
        try await connection.returnsRow(
            """
            INSERT INTO space_invitations (space_id, email_normalized, permission, invited_by)
            VALUES (\(space), \(emailNormalized), \(permission.rawValue), \(inviter))
            ON CONFLICT (space_id, email_normalized) DO NOTHING RETURNING 1
            """, logger: logger)
    }

    /// Invites an account by its id; false if it is already invited to the space.
    func invite(account user: UUID, to space: UUID, permission: SpacePermission, by inviter: UUID, on connection: PostgresConnection, logger: Logger)
        async throws -> Bool
    {
        try await connection.returnsRow(
            """
            INSERT INTO space_account_invitations (space_id, user_id, permission, invited_by)
            VALUES (\(space), \(user), \(permission.rawValue), \(inviter))
            ON CONFLICT (space_id, user_id) DO NOTHING RETURNING 1
            """, logger: logger)
    }

    /// The invitation of an account just made, for the response.
    func invitation(account user: UUID, to space: UUID, on connection: PostgresConnection, logger: Logger) async throws -> SpaceMemberRecord? {
        let rows = try await connection.checkedQuery(
            "SELECT permission, created_at FROM space_account_invitations WHERE space_id = \(space) AND user_id = \(user)", logger: logger)
        var found: SpaceMemberRecord?
        for try await (permission, created) in rows.decode((String, Date).self) {
            found = SpaceMemberRecord(userID: user, email: nil, permission: SpacePermission(rawValue: permission) ?? .viewer, since: created, invited: true)
        }
        return found
    }

    /// The invitations to an account, newest first, with their spaces' names; none from an account
    /// it blocks or that blocks it.
    func invitations(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [SpaceInvitationRecord] {
        let rows = try await connection.checkedQuery(
            """
            SELECT s.id, s.name, i.permission, i.created_at FROM space_account_invitations i JOIN spaces s ON s.id = i.space_id
            WHERE i.user_id = \(user) AND \(unescaped: BlockStore.neitherBlocks("i.user_id", "i.invited_by"))
            ORDER BY i.created_at DESC, s.id
            """, logger: logger)
        return try await Self.offered(rows)
    }

    /// Removes the account's invitation to the space, answering the permission it offered; nil when
    /// there was none, or it came from an account it blocks or that blocks it.
    func takeInvitation(account user: UUID, to space: UUID, on connection: PostgresConnection, logger: Logger) async throws -> SpacePermission? {
        let rows = try await connection.checkedQuery(
            """
            DELETE FROM space_account_invitations i WHERE i.space_id = \(space) AND i.user_id = \(user)
              AND \(unescaped: BlockStore.neitherBlocks("i.user_id", "i.invited_by"))
            RETURNING i.permission
            """, logger: logger)
        return try await Self.permission(rows)
    }

    /// The invitation just made, for the response.
    func invitation(_ emailNormalized: String, to space: UUID, on connection: PostgresConnection, logger: Logger) async throws -> SpaceMemberRecord? {
        let rows = try await connection.checkedQuery(
            "SELECT permission, created_at FROM space_invitations WHERE space_id = \(space) AND email_normalized = \(emailNormalized)", logger: logger)
        var found: SpaceMemberRecord?
        for try await (permission, created) in rows.decode((String, Date).self) {
            found = SpaceMemberRecord(userID: nil, email: emailNormalized, permission: SpacePermission(rawValue: permission) ?? .viewer, since: created)
        }
        return found
    }

    /// The invitations to an address, newest first, with their spaces' names; none from an account
    /// its holder `user` blocks or that blocks them.
    func invitations(to emailNormalized: String, heldBy user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [SpaceInvitationRecord] {
        let rows = try await connection.checkedQuery(
            """
            SELECT s.id, s.name, i.permission, i.created_at FROM space_invitations i JOIN spaces s ON s.id = i.space_id
            WHERE i.email_normalized = \(emailNormalized) AND \(unescaped: BlockStore.neitherBlocks(BlockStore.literal(user), "i.invited_by"))
            ORDER BY i.created_at DESC, s.id
            """, logger: logger)
        return try await Self.offered(rows)
    }

    /// Removes the address's invitation to the space, answering the permission it offered; nil
    /// when there was none, or it came from an account its holder `user` blocks or that blocks them.
    func takeInvitation(_ emailNormalized: String, heldBy user: UUID, to space: UUID, on connection: PostgresConnection, logger: Logger) async throws
        -> SpacePermission?
    {
        let rows = try await connection.checkedQuery(
            """
            DELETE FROM space_invitations i WHERE i.space_id = \(space) AND i.email_normalized = \(emailNormalized)
              AND \(unescaped: BlockStore.neitherBlocks(BlockStore.literal(user), "i.invited_by"))
            RETURNING i.permission
            """, logger: logger)
        return try await Self.permission(rows)
    }

    /// Invitations as their addressee sees them, from rows of (space id, name, permission, made at).
    private static func offered(_ rows: PostgresRowSequence) async throws -> [SpaceInvitationRecord] {
        var found: [SpaceInvitationRecord] = []
        for try await (id, name, permission, created) in rows.decode((UUID, String, String, Date).self) {
            found.append(SpaceInvitationRecord(spaceID: id, name: name, permission: SpacePermission(rawValue: permission) ?? .viewer, invitedAt: created))
        }
        return found
    }

    /// The permission an invitation taken offered (`RETURNING permission`); nil for none.
    private static func permission(_ rows: PostgresRowSequence) async throws -> SpacePermission? {
        var found: SpacePermission?
        for try await permission in rows.decode(String.self) { found = SpacePermission(rawValue: permission) ?? .viewer }
        return found
    }

    func setPermission(_ user: UUID, of space: UUID, to permission: SpacePermission, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE space_members SET permission = \(permission.rawValue) WHERE space_id = \(space) AND user_id = \(user)", logger: logger)
    }

    /// Removes a member (never call it for the owner), or withdraws the account's invitation; a
    /// transfer offered to them lapses. False if they were neither.
    func removeMember(_ user: UUID, from space: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let removed = try await connection.returnsRow(
            "DELETE FROM space_members WHERE space_id = \(space) AND user_id = \(user) AND permission <> 'owner' RETURNING 1", logger: logger)
        if removed {
            try await connection.checkedRun(
                "UPDATE spaces SET pending_owner_id = NULL, transfer_offered_at = NULL WHERE id = \(space) AND pending_owner_id = \(user)", logger: logger)
        }
        let withdrawn = try await connection.returnsRow(
            "DELETE FROM space_account_invitations WHERE space_id = \(space) AND user_id = \(user) RETURNING 1", logger: logger)
        return removed || withdrawn
    }

    // MARK: ownership

    /// Offers ownership to a member; an earlier offer is replaced.
    func offerOwnership(of space: UUID, to user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE spaces SET pending_owner_id = \(user), transfer_offered_at = now(), updated_at = now() WHERE id = \(space)", logger: logger)
    }

    /// `newOwner` becomes the owner and the old owner an editor. The caller holds the space's lock
    /// and checked the offer. The old owner is demoted first: the partial unique index allows one
    /// owner at any moment.
    func acceptOwnership(of space: UUID, by newOwner: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "UPDATE space_members SET permission = 'editor' WHERE space_id = \(space) AND permission = 'owner' AND user_id <> \(newOwner)", logger: logger)
        try await connection.checkedRun(
            "UPDATE space_members SET permission = 'owner' WHERE space_id = \(space) AND user_id = \(newOwner)", logger: logger)
        try await connection.checkedRun(
            "UPDATE spaces SET pending_owner_id = NULL, transfer_offered_at = NULL, updated_at = now() WHERE id = \(space)", logger: logger)
    }

    // MARK: accounts

    /// Whether auth announced the account (`user.registered`).
    func accountExists(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM customers WHERE user_id = \(user)", logger: logger)
    }

    /// The user's address once auth has proven it (`user.email_verified`; a provider's sign-up alone is not).
    func provenEmail(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> String? {
        var found: String?
        let rows = try await connection.checkedQuery(
            "SELECT email_normalized FROM customers WHERE user_id = \(user) AND email_verified", logger: logger)
        for try await email in rows.decode(String?.self) { found = email }
        return found
    }

    /// The user's own address as auth announced it.
    func email(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> String? {
        var found: String?
        let rows = try await connection.checkedQuery("SELECT email_normalized FROM customers WHERE user_id = \(user)", logger: logger)
        for try await email in rows.decode(String?.self) { found = email }
        return found
    }

    /// Serializes what concerns one address's invitations: the route inviting it and its holder
    /// accepting or declining both take it first. Taken
    /// before the space's row lock, in each, so they never wait on each other in a cycle.
    func lockAddress(_ emailNormalized: String, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            "SELECT pg_advisory_xact_lock(hashtext('entitlements.space_address:' || \(emailNormalized)))", logger: logger)
    }

    // MARK: events

    /// `user.deleted`: each space they own passes to its earliest editor (by `joined_at`), else its
    /// earliest member, and with no other member is deleted; their other memberships, the transfers
    /// offered to them, the invitations they sent and those to their account go. Idempotent, for a redelivered event.
    func userDeleted(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await passOwnedSpaces(of: user, on: connection, logger: logger)
        try await connection.checkedRun("DELETE FROM space_members WHERE user_id = \(user) AND permission <> 'owner'", logger: logger)
        // Again: a membership the statement above waited for may have become the space's ownership
        // meanwhile (another owner's deletion passing the space on), and was then left; its
        // ownership is committed now, and this pass finds it.
        try await passOwnedSpaces(of: user, on: connection, logger: logger)
        try await connection.checkedRun(
            "UPDATE spaces SET pending_owner_id = NULL, transfer_offered_at = NULL WHERE pending_owner_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM space_invitations WHERE invited_by = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM space_account_invitations WHERE user_id = \(user) OR invited_by = \(user)", logger: logger)
    }

    /// Each space `user` owns passes to its earliest editor, else its earliest member, or is deleted.
    private func passOwnedSpaces(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        // The spaces they own, locked in id order (two deletions at once cannot deadlock).
        var owned: [UUID] = []
        let rows = try await connection.checkedQuery(
            """
            SELECT s.id FROM spaces s JOIN space_members m ON m.space_id = s.id
            WHERE m.user_id = \(user) AND m.permission = 'owner' ORDER BY s.id FOR UPDATE OF s
            """, logger: logger)
        for try await id in rows.decode(UUID.self) { owned.append(id) }
        for space in owned {
            // Still theirs once locked (a transfer may have committed while this waited).
            guard try await member(user, of: space, on: connection, logger: logger)?.permission == .owner else { continue }
            var successor: UUID?
            let candidates = try await connection.checkedQuery(
                """
                SELECT user_id FROM space_members WHERE space_id = \(space) AND user_id <> \(user)
                ORDER BY (permission = 'editor') DESC, joined_at, user_id LIMIT 1
                """, logger: logger)
            for try await candidate in candidates.decode(UUID.self) { successor = candidate }
            if let successor {
                try await connection.checkedRun("DELETE FROM space_members WHERE space_id = \(space) AND user_id = \(user)", logger: logger)
                try await connection.checkedRun(
                    "UPDATE space_members SET permission = 'owner' WHERE space_id = \(space) AND user_id = \(successor)", logger: logger)
                try await connection.checkedRun(
                    "UPDATE spaces SET pending_owner_id = NULL, transfer_offered_at = NULL, updated_at = now() WHERE id = \(space)", logger: logger)
            } else {
                try await delete(space, on: connection, logger: logger)
            }
        }
    }

    /// `user.password_changed` with `maker_dropped`: the address's owner proved it for the first
    /// time, so what the account's maker set up goes. The spaces it owns, with their members and
    /// invitations; its memberships of other spaces and the transfers offered to it; the invitations
    /// it made to them, and those made to the account (its maker may have asked for them).
    /// Invitations to its address stay: others made them for the address.
    func makerDropped(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        // Locked in id order, as `userDeleted` does.
        var owned: [UUID] = []
        let rows = try await connection.checkedQuery(
            """
            SELECT s.id FROM spaces s JOIN space_members m ON m.space_id = s.id
            WHERE m.user_id = \(user) AND m.permission = 'owner' ORDER BY s.id FOR UPDATE OF s
            """, logger: logger)
        for try await id in rows.decode(UUID.self) { owned.append(id) }
        for space in owned where try await member(user, of: space, on: connection, logger: logger)?.permission == .owner {
            try await delete(space, on: connection, logger: logger)
        }
        // The invitations to the account first: an acceptance under way holds its invitation, so this
        // waits for it to commit, and the memberships' statement after it finds the member it made.
        try await connection.checkedRun("DELETE FROM space_account_invitations WHERE user_id = \(user) OR invited_by = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM space_members WHERE user_id = \(user) AND permission <> 'owner'", logger: logger)
        try await connection.checkedRun(
            "UPDATE spaces SET pending_owner_id = NULL, transfer_offered_at = NULL WHERE pending_owner_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM space_invitations WHERE invited_by = \(user)", logger: logger)
    }
}
