import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Blocks and mutes. A block separates two people (the caller does that with `FollowStore`); a mute
/// only silences notifications, optionally until a time.
struct BlockStore: Sendable {
    /// True when the block is new.
    func block(_ blocker: UUID, _ blocked: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        return try await connection.returnsRow(
            "INSERT INTO blocks (blocker_id, blocked_id) VALUES (\(blocker), \(blocked)) ON CONFLICT DO NOTHING RETURNING true", logger: logger)
    }

    func isBlocking(_ blocker: UUID, _ blocked: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT true FROM blocks WHERE blocker_id = \(blocker) AND blocked_id = \(blocked)", logger: logger)
    }

    /// True when there was a block to lift.
    func unblock(_ blocker: UUID, _ blocked: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        return try await connection.returnsRow(
            "DELETE FROM blocks WHERE blocker_id = \(blocker) AND blocked_id = \(blocked) RETURNING true", logger: logger)
    }

    /// Blocks, newest first, leaving out profiles moderators hid.
    func blocks(of blocker: UUID, limit: Int, after: TimeCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [(ListedProfile, TimeCursor)] {
        let (micros, tie) = TimeCursor.bounds(after)
        let rows = try await connection.checkedQuery(
            """
            SELECT \(unescaped: ProfileSummary.columns), b.created_at, \(unescaped: TimeCursor.micros("b.created_at"))
            FROM blocks b JOIN profiles p ON p.user_id = b.blocked_id
            WHERE b.blocker_id = \(blocker) AND p.hidden_at IS NULL
              AND (b.created_at, b.blocked_id) < ('epoch'::timestamptz + \(micros) * interval '1 microsecond', \(tie))
            ORDER BY b.created_at DESC, b.blocked_id DESC LIMIT \(limit + 1)
            """, logger: logger)
        return try await FollowStore.listed(rows) { $0.blockedAt = $1 }
    }

    /// Mutes (or re-mutes with a new end); `until` nil is for good.
    func mute(_ muter: UUID, _ muted: UUID, until: Date?, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO mutes (muter_id, muted_id, until) VALUES (\(muter), \(muted), \(until))
            ON CONFLICT (muter_id, muted_id) DO UPDATE SET until = excluded.until
            """, logger: logger)
    }

    func unmute(_ muter: UUID, _ muted: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        return try await connection.returnsRow("DELETE FROM mutes WHERE muter_id = \(muter) AND muted_id = \(muted) RETURNING true", logger: logger)
    }

    /// Mutes still in force, newest first, leaving out hidden profiles and people who now block the
    /// muter (the mute stays, and shows again if they unblock).
    func mutes(of muter: UUID, limit: Int, after: TimeCursor?, on connection: PostgresConnection, logger: Logger) async throws -> [(ListedProfile, TimeCursor)] {
        let (micros, tie) = TimeCursor.bounds(after)
        let rows = try await connection.checkedQuery(
            """
            SELECT \(unescaped: ProfileSummary.columns), m.created_at, \(unescaped: TimeCursor.micros("m.created_at")), m.until
            FROM mutes m JOIN profiles p ON p.user_id = m.muted_id
            WHERE m.muter_id = \(muter) AND (m.until IS NULL OR m.until > now()) AND p.hidden_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = m.muted_id AND b.blocked_id = \(muter))
              AND (m.created_at, m.muted_id) < ('epoch'::timestamptz + \(micros) * interval '1 microsecond', \(tie))
            ORDER BY m.created_at DESC, m.muted_id DESC LIMIT \(limit + 1)
            """, logger: logger)
        var result: [(ListedProfile, TimeCursor)] = []
        for try await (id, username, name, etag, verified, since, micros, until) in rows.decode((UUID, String?, String?, String?, Bool, Date, Int64, Date?).self) {
            var item = ListedProfile(ProfileSummary((id, username, name, etag, verified)))
            item.mutedAt = since
            item.mutedUntil = until
            result.append((item, TimeCursor(micros: micros, id: id)))
        }
        return result
    }
}
