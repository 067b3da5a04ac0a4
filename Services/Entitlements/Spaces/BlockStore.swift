import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Social's blocks, as its events say (`0015_blocks.sql`): an account that blocks another, or is
/// blocked by it, is not invited by it to a space, by id or at its proven address, and does not see
/// or take its invitations. A block ends the invitations pending between the two.
struct BlockStore: Sendable {
    /// Records what `block.created` (`blocking`) or `block.removed` says of the pair, unless social's
    /// newer event about it came first or either account is deleted; true when recorded.
    /// A block takes the pair's lock (`lockPair`); a lifting needs none (the row's upsert orders
    /// events of one pair), and is handled in a batch, where holding pairs could deadlock.
    func record(blocker: UUID, blocked: UUID, blocking: Bool, order: EventOrder, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        if blocking { try await lockPair(blocker, blocked, on: connection, logger: logger) }
        return try await connection.returnsRow(
            """
            INSERT INTO blocks (blocker_id, blocked_id, blocking, seq, occurred_at)
            SELECT \(blocker), \(blocked), \(blocking), \(order.sequence), \(order.occurredAt)
            WHERE hold_live_account(\(blocker)) AND hold_live_account(\(blocked))
            ON CONFLICT (blocker_id, blocked_id) DO UPDATE SET blocking = EXCLUDED.blocking, seq = EXCLUDED.seq, occurred_at = EXCLUDED.occurred_at
            WHERE CASE WHEN blocks.seq IS NOT NULL AND EXCLUDED.seq IS NOT NULL THEN EXCLUDED.seq > blocks.seq
                       ELSE EXCLUDED.occurred_at >= blocks.occurred_at END
            RETURNING true
            """, logger: logger)
    }

    /// Serializes what concerns two accounts' blocks: a block's record (and the end of the invitations
    /// between them) and an invitation by id between them, which checks for a block first. Without it
    /// an invitation checked before the block committed, and made after its deletions, outlived it.
    /// Taken after the space's lock by the route; the handler takes no space's lock. (45324, 0xB10C:
    /// the pairs' own space of advisory locks, apart from the single-key locks of addresses and the
    /// relay, which a pair's hash could otherwise meet.)
    func lockPair(_ one: UUID, _ other: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        let (low, high) = one.uuidString < other.uuidString ? (one, other) : (other, one)
        try await connection.checkedRun(
            "SELECT pg_advisory_xact_lock(45324, hashtext(\(low.uuidString) || ':' || \(high.uuidString)))", logger: logger)
    }

    /// Whether either account blocks the other.
    func eitherBlocks(_ one: UUID, _ other: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(
            "SELECT 1 WHERE NOT \(unescaped: Self.neitherBlocks(Self.literal(one), Self.literal(other)))", logger: logger)
    }

    /// The invitations pending between the two go: each one's to the other's account, and to the
    /// other's proven address.
    func dropInvitations(between one: UUID, _ other: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            DELETE FROM space_account_invitations
            WHERE (user_id = \(one) AND invited_by = \(other)) OR (user_id = \(other) AND invited_by = \(one))
            """, logger: logger)
        try await connection.checkedRun(
            """
            DELETE FROM space_invitations i USING customers c
            WHERE c.email_verified AND i.email_normalized = c.email_normalized
              AND ((c.user_id = \(one) AND i.invited_by = \(other)) OR (c.user_id = \(other) AND i.invited_by = \(one)))
            """, logger: logger)
    }

    /// `maker_dropped`: the blocks the account's maker made go with the rest of what they made, as
    /// social drops them (without a `block.removed`). Kept as lifted, with their order, so that an
    /// older `block.created` delivered late changes nothing.
    func makerDropped(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("UPDATE blocks SET blocking = false WHERE blocker_id = \(user) AND blocking", logger: logger)
    }

    /// `user.deleted`: the account's blocks, either way, go.
    func forget(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM blocks WHERE blocker_id = \(user) OR blocked_id = \(user)", logger: logger)
    }

    /// SQL that holds when neither of two accounts (SQL expressions of their ids) blocks the other.
    static func neitherBlocks(_ one: String, _ other: String) -> String {
        """
        NOT EXISTS (SELECT 1 FROM blocks b WHERE b.blocking AND ((b.blocker_id = \(one) AND b.blocked_id = \(other)) \
        OR (b.blocker_id = \(other) AND b.blocked_id = \(one))))
        """
    }

    /// An account's id as an SQL literal: a UUID's text is hex digits and dashes alone.
    static func literal(_ user: UUID) -> String { "'\(user.uuidString)'::uuid" }
}
