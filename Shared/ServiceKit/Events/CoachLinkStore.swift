import Foundation
import Logging
import PostgresNIO
import ServiceKitDatabase

/// Which coach coaches which client, as a consumer of invitations' events keeps it: from
/// `invitation.accepted` until `client.unlinked`, in the order invitations' database gave the two events, not the order they arrived in, nor the
/// clocks of the processes that wrote them.
///
/// Each link's latest acceptance and latest end are kept with their `EventOrder`. One order is
/// after another when its `sequence` (the producer's outbox number) is greater, or, when either
/// has none (an event relayed before envelopes carried one), when its `occurred_at` is later.
/// Invitations writes every event of one client's links in a transaction that holds that client's
/// accepted roster row, so its numbers follow commit order for them.
///
/// The acceptance and the unlink of one pair can be handled at the same moment (two processes of a
/// service take turns at the stream's batches): each holds the pair (`hold`) before it reads or
/// writes, so the second sees what the first committed, and an unlink is never missed by the link
/// it followed.
///
/// A service that keeps links creates the two tables it writes, `coach_links` and `coach_unlinks`,
/// in its own schema (nutrition's and training's migrations have the same columns).
public struct CoachLinkStore: Sendable {
    public init() {}

    /// What an acceptance made of the pair's link.
    public enum Acceptance: Sendable, Equatable {
        /// The pair's latest acceptance heard: the link is this one's.
        case latest
        /// A later acceptance of the pair was heard first: the link is that one's. Invitations keeps
        /// one accepted roster entry per client, so this acceptance's entry ended before that one.
        case superseded
        /// The link ended after this acceptance (a late acceptance, delivered after the unlink that
        /// followed it): nothing is linked.
        case ended
    }

    /// Links them, unless the link ended after this acceptance (a late acceptance, delivered after
    /// the unlink that followed it); a link kept from an earlier acceptance takes this one's order.
    /// A caller that keeps roster entries ends this acceptance's entry unless it is the `latest`
    /// (an unlink written before events named the entry could not end it), and, when it is, the
    /// pair's other entries.
    @discardableResult
    public func link(coach: UUID, client: UUID, order: EventOrder, on connection: PostgresConnection, logger: Logger) async throws -> Acceptance {
        try await hold(coach: coach, client: client, on: connection, logger: logger)
        let endedAfter = try await connection.returnsRow(
            """
            SELECT 1 FROM coach_unlinks u WHERE u.coach_id = \(coach) AND u.client_id = \(client)
            AND CASE WHEN u.unlinked_seq IS NOT NULL AND \(order.sequence)::int8 IS NOT NULL THEN u.unlinked_seq > \(order.sequence)::int8
                     ELSE u.unlinked_at >= \(order.occurredAt) END
            """, logger: logger)
        guard !endedAfter else { return .ended }
        // The link as it stands after this acceptance, and whether a later one's order kept it.
        let supersededBy = try await connection.returnsRow(
            """
            WITH upserted AS (
                INSERT INTO coach_links (coach_id, client_id, linked_at, linked_seq)
                VALUES (\(coach), \(client), \(order.occurredAt), \(order.sequence)::int8)
                ON CONFLICT (coach_id, client_id) DO UPDATE SET linked_at = EXCLUDED.linked_at, linked_seq = EXCLUDED.linked_seq
                WHERE CASE WHEN EXCLUDED.linked_seq IS NOT NULL AND coach_links.linked_seq IS NOT NULL THEN EXCLUDED.linked_seq > coach_links.linked_seq
                           ELSE EXCLUDED.linked_at > coach_links.linked_at END
                RETURNING 1
            )
            SELECT 1 FROM coach_links l WHERE NOT EXISTS (SELECT 1 FROM upserted)
            AND l.coach_id = \(coach) AND l.client_id = \(client)
            AND CASE WHEN l.linked_seq IS NOT NULL AND \(order.sequence)::int8 IS NOT NULL THEN l.linked_seq > \(order.sequence)::int8
                     ELSE l.linked_at > \(order.occurredAt) END
            """, logger: logger)
        return supersededBy ? .superseded : .latest
    }

    /// Ends the link if it was accepted before this unlink, and remembers the unlink (the latest one).
    /// Whether the pair is unlinked now: false for a late unlink, delivered after a later acceptance
    /// of the same pair, whose link stays (and whose roster entry the caller must not end).
    @discardableResult
    public func unlink(coach: UUID, client: UUID, order: EventOrder, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await hold(coach: coach, client: client, on: connection, logger: logger)
        try await connection.checkedRun(
            """
            DELETE FROM coach_links WHERE coach_id = \(coach) AND client_id = \(client)
            AND CASE WHEN linked_seq IS NOT NULL AND \(order.sequence)::int8 IS NOT NULL THEN linked_seq < \(order.sequence)::int8
                     ELSE linked_at <= \(order.occurredAt) END
            """, logger: logger)
        // A link the delete kept was accepted after this unlink.
        let linkedAfter = try await connection.returnsRow(
            "SELECT 1 FROM coach_links WHERE coach_id = \(coach) AND client_id = \(client)", logger: logger)
        try await connection.checkedRun(
            """
            INSERT INTO coach_unlinks (coach_id, client_id, unlinked_at, unlinked_seq) VALUES (\(coach), \(client), \(order.occurredAt), \(order.sequence)::int8)
            ON CONFLICT (coach_id, client_id) DO UPDATE SET unlinked_at = EXCLUDED.unlinked_at, unlinked_seq = EXCLUDED.unlinked_seq
            WHERE CASE WHEN EXCLUDED.unlinked_seq IS NOT NULL AND coach_unlinks.unlinked_seq IS NOT NULL THEN EXCLUDED.unlinked_seq > coach_unlinks.unlinked_seq
                       ELSE EXCLUDED.unlinked_at > coach_unlinks.unlinked_at END
            """, logger: logger)
        return !linkedAfter
    }

    /// Holds the pair until the transaction ends; the statements after it see what an acceptance or
    /// unlink of the pair that held it before committed.
    private func hold(coach: UUID, client: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        let key = "coach_link:\(coach.uuidString.lowercased()):\(client.uuidString.lowercased())"
        try await connection.checkedRun("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':' || \(key)))", logger: logger)
    }

    /// Asked by every coach's read of a client's data: prepared once per connection.
    public func isLinked(coach: UUID, client: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await connection.returnsRow(LinkCheck(coach: coach, client: client), logger: logger)
    }

    struct LinkCheck: PostgresPreparedStatement {
        static let name = "coach_links.check"
        static let sql = "SELECT 1 FROM coach_links WHERE coach_id = $1 AND client_id = $2"
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .uuid]
        typealias Row = Void
        let coach: UUID
        let client: UUID
        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(coach)
            bindings.append(client)
            return bindings
        }
        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Ends every link of `user`'s, as coach or as client, accepted before `order`, remembering it.
    public func endAll(of user: UUID, order: EventOrder, on connection: PostgresConnection, logger: Logger) async throws {
        let rows = try await connection.checkedQuery(
            "SELECT coach_id, client_id FROM coach_links WHERE coach_id = \(user) OR client_id = \(user) ORDER BY coach_id, client_id", logger: logger)
        var links: [(UUID, UUID)] = []
        for try await link in rows.decode((UUID, UUID).self) { links.append(link) }
        for (coach, client) in links {
            try await unlink(coach: coach, client: client, order: order, on: connection, logger: logger)
        }
    }

    public func forget(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.checkedRun("DELETE FROM coach_links WHERE coach_id = \(user) OR client_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM coach_unlinks WHERE coach_id = \(user) OR client_id = \(user)", logger: logger)
    }
}
