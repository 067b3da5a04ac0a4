import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Coaches' roster entries as invitations announces them (`client.invited`, `invitation.accepted`,
/// `client.unlinked`, `client.removed`). A coach plans sessions for an entry, before or after its
/// client accepted; the acceptance gives them to the client's account.
///
/// An entry's life only goes forward (`Stage`), so each event raises the stage to its own and never
/// lowers it: events delivered twice or out of order settle on the same state.
struct RosterStore: Sendable {
    enum Stage: Int16, Sendable {
        case pending = 0, accepted = 1, left = 2, removed = 3
        var name: String {
            switch self {
            case .pending: "pending"
            case .accepted: "accepted"
            case .left: "left"
            case .removed: "removed"
            }
        }
    }

    struct Entry: Sendable {
        var id: UUID
        var coachID: UUID
        var clientID: UUID?
        var stage: Stage
    }

    /// With `lock`, the entry is held until the caller's transaction ends, against the acceptance,
    /// the unlink and other assignments for it alike: a client's day holds at most
    /// `SessionStore.maxSessionsPerDay` of the coach's sessions however many are sent at once.
    func find(_ id: UUID, lock: Bool = false, on connection: PostgresConnection, logger: Logger) async throws -> Entry? {
        let rows = try await connection.checkedQuery(
            "SELECT id, coach_id, client_id, stage FROM roster_entries WHERE id = \(id) \(unescaped: lock ? "FOR NO KEY UPDATE" : "")", logger: logger)
        for try await (id, coach, client, stage) in rows.decode((UUID, UUID, UUID?, Int16).self) {
            return Entry(id: id, coachID: coach, clientID: client, stage: Stage(rawValue: stage) ?? .removed)
        }
        return nil
    }

    /// Whether a coach coaches `client` now: an accepted roster entry names their account. An entry
    /// they left does not count: a client switching coaches has one before the new acceptance
    /// arrives.
    func isCoached(_ client: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow("SELECT 1 FROM roster_entries WHERE client_id = \(client) AND stage = \(Stage.accepted.rawValue) LIMIT 1", logger: logger)
    }

    /// Whether the named entry (or `coach`'s) alone coaches `client` now: it is accepted and names
    /// them, and no other accepted entry does. A client has one coach at a time (invitations ends the
    /// former link before a switch, or before a second invitation of the same coach is accepted), so
    /// another entry still accepted is an unlink not heard yet.
    func isCoached(_ client: UUID, onlyThrough link: AcceptedLink, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        // Over no rows `bool_and` is null, and no row comes back.
        switch link {
        case .coach(let coach):
            try await connection.returnsRow(
                "SELECT 1 FROM roster_entries WHERE client_id = \(client) AND stage = \(Stage.accepted.rawValue) HAVING bool_and(coach_id = \(coach))", logger: logger)
        case .entry(let entry):
            try await connection.returnsRow(
                "SELECT 1 FROM roster_entries WHERE client_id = \(client) AND stage = \(Stage.accepted.rawValue) HAVING bool_and(id = \(entry))", logger: logger)
        }
    }

    /// Whether the named entry is, or may yet become, `client`'s: still waiting for its client
    /// (`pending`), or accepted by `client`; for a coach, whether any of the coach's entries is.
    /// Through the primary key, or the coach's index.
    func mayCoach(_ client: UUID, through link: AcceptedLink, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        switch link {
        case .coach(let coach):
            try await connection.returnsRow(
                """
                SELECT 1 FROM roster_entries WHERE coach_id = \(coach)
                AND (stage = \(Stage.pending.rawValue) OR (stage = \(Stage.accepted.rawValue) AND client_id = \(client))) LIMIT 1
                """, logger: logger)
        case .entry(let entry):
            try await connection.returnsRow(
                """
                SELECT 1 FROM roster_entries WHERE id = \(entry)
                AND (stage = \(Stage.pending.rawValue) OR (stage = \(Stage.accepted.rawValue) AND client_id = \(client)))
                """, logger: logger)
        }
    }

    /// Raises the entry to `stage` (making it if this is the first event about it); `client` is
    /// recorded when given. An entry already known under another coach is left alone.
    func advance(_ id: UUID, coach: UUID, client: UUID?, to stage: Stage, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun(
            """
            INSERT INTO roster_entries (id, coach_id, client_id, stage) VALUES (\(id), \(coach), \(client), \(stage.rawValue))
            ON CONFLICT (id) DO UPDATE SET stage = greatest(roster_entries.stage, EXCLUDED.stage),
                client_id = coalesce(EXCLUDED.client_id, roster_entries.client_id), updated_at = now()
            WHERE roster_entries.coach_id = EXCLUDED.coach_id
            """, logger: logger)
    }

    /// The accepted entries of `coach` and `client` (an unlink written before events named the entry).
    func accepted(coach: UUID, client: UUID, on connection: PostgresConnection, logger: Logger) async throws -> [UUID] {
        var ids: [UUID] = []
        let rows = try await connection.checkedQuery(
            "SELECT id FROM roster_entries WHERE coach_id = \(coach) AND client_id = \(client) AND stage = 1 ORDER BY id", logger: logger)
        for try await id in rows.decode(UUID.self) { ids.append(id) }
        return ids
    }
}

/// What a client names of the invitation they have just accepted, for a read that waits for it:
/// its roster entry (invitations' answer), or its coach.
enum AcceptedLink: Sendable, Equatable {
    case entry(UUID)
    case coach(UUID)
}
