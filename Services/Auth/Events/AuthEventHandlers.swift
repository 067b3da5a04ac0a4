import Foundation
import ServiceKit

/// Events from other services that change accounts: a client's role follows their coach links.
struct AuthEventHandlers {
    let accounts: Accounts

    var handlers: EventHandlers {
        var handlers = EventHandlers()
        let accounts = self.accounts
        // An accepted invitation makes the invitee the coach's client. A coach cannot also be a
        // client: such an acceptance is logged and left alone rather than retried forever.
        handlers.on(InvitationAccepted.self) { event, context in
            guard let user = try await accounts.users.find(id: event.clientID, forUpdate: true, on: context.connection, logger: context.logger) else {
                context.logger.info("invitation accepted by an account that no longer exists", metadata: ["user_id": "\(event.clientID)"])
                return
            }
            guard !user.roles.contains(.coach) else {
                context.logger.warning("invitation accepted by a coach; client role not granted", metadata: ["user_id": "\(user.id)", "invitation_id": "\(event.invitationID)"])
                return
            }
            // In the order invitations' database gave its events (`EventOrder`): an acceptance from
            // before the client's last unlink, handled after it (the other process took it first, or
            // a failed try was retried), grants no role back to a client who has left.
            let order = EventOrder(context.envelope, among: "invitations")
            guard try await !Self.mark(.left, of: user.id, isLaterThan: order, context) else { return }
            try await Self.record(order, as: .accepted, of: user.id, context)
            _ = try await accounts.changeRoles(of: user, adding: [.client], on: context.connection)
        }
        // A client with no coach left is no longer a client; an unlink from before the latest
        // acceptance (delivered late, after a retry) changes nothing.
        handlers.on(ClientUnlinked.self) { event, context in
            guard !event.hasOtherCoach, let user = try await accounts.users.find(id: event.clientID, forUpdate: true, on: context.connection, logger: context.logger)
            else { return }
            // The latest unlink, kept whether or not the account holds the role yet: the acceptance
            // it ends may be handled after it.
            let order = EventOrder(context.envelope, among: "invitations")
            try await Self.record(order, as: .left, of: user.id, context)
            guard user.roles.contains(.client), try await !Self.mark(.accepted, of: user.id, isLaterThan: order, context) else { return }
            _ = try await accounts.changeRoles(of: user, removing: [.client], on: context.connection)
        }
        return handlers
    }

    /// The two marks of a client's coach links, each the order of the latest event of its kind:
    /// `client_since` (+`_seq`) of the latest acceptance, `client_until` of the latest unlink that
    /// left no coach.
    enum LinkMark: String {
        case accepted = "client_since"
        case left = "client_until"
    }

    /// Records `order` as `mark` unless the mark holds a later event already.
    static func record(_ order: EventOrder, as mark: LinkMark, of user: UUID, _ context: EventContext) async throws {
        let column = mark.rawValue
        try await context.connection.checkedRun(
            """
            UPDATE users u SET \(unescaped: column) = e.at, \(unescaped: column)_seq = e.seq
            FROM (SELECT \(order.occurredAt)::timestamptz AS at, \(order.sequence)::int8 AS seq) e
            WHERE u.id = \(user) AND (u.\(unescaped: column) IS NULL
                OR CASE WHEN u.\(unescaped: column)_seq IS NOT NULL AND e.seq IS NOT NULL THEN e.seq > u.\(unescaped: column)_seq
                        ELSE e.at > u.\(unescaped: column) END)
            """,
            logger: context.logger)
    }

    /// Whether `mark` holds an event later than `order` (by the producer's sequence when both have
    /// one, else by time).
    static func mark(_ mark: LinkMark, of user: UUID, isLaterThan order: EventOrder, _ context: EventContext) async throws -> Bool {
        let column = mark.rawValue
        return try await context.connection.returnsRow(
            """
            SELECT 1 FROM users WHERE id = \(user)
            AND CASE WHEN \(unescaped: column)_seq IS NOT NULL AND \(order.sequence)::int8 IS NOT NULL THEN \(unescaped: column)_seq > \(order.sequence)::int8
                     ELSE \(unescaped: column) > \(order.occurredAt) END
            """, logger: context.logger)
    }
}
