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
            let leftSince = try await context.connection.returnsRow(
                """
                SELECT 1 FROM users WHERE id = \(user.id) AND client_until IS NOT NULL
                AND CASE WHEN client_until_seq IS NOT NULL AND \(order.sequence)::int8 IS NOT NULL THEN client_until_seq > \(order.sequence)::int8
                         ELSE client_until > \(order.occurredAt) END
                """, logger: context.logger)
            guard !leftSince else { return }
            // The latest acceptance.
            try await context.connection.checkedRun(
                """
                UPDATE users u SET client_since = e.at, client_since_seq = e.seq
                FROM (SELECT \(order.occurredAt)::timestamptz AS at, \(order.sequence)::int8 AS seq) e
                WHERE u.id = \(user.id) AND (u.client_since IS NULL
                    OR CASE WHEN u.client_since_seq IS NOT NULL AND e.seq IS NOT NULL THEN e.seq > u.client_since_seq ELSE e.at > u.client_since END)
                """,
                logger: context.logger)
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
            try await context.connection.checkedRun(
                """
                UPDATE users u SET client_until = e.at, client_until_seq = e.seq
                FROM (SELECT \(order.occurredAt)::timestamptz AS at, \(order.sequence)::int8 AS seq) e
                WHERE u.id = \(user.id) AND (u.client_until IS NULL
                    OR CASE WHEN u.client_until_seq IS NOT NULL AND e.seq IS NOT NULL THEN e.seq > u.client_until_seq ELSE e.at > u.client_until END)
                """,
                logger: context.logger)
            guard user.roles.contains(.client) else { return }
            let acceptedLater = try await context.connection.returnsRow(
                """
                SELECT 1 FROM users WHERE id = \(user.id)
                AND CASE WHEN client_since_seq IS NOT NULL AND \(order.sequence)::int8 IS NOT NULL THEN client_since_seq > \(order.sequence)::int8
                         ELSE client_since > \(order.occurredAt) END
                """, logger: context.logger)
            guard !acceptedLater else { return }
            _ = try await accounts.changeRoles(of: user, removing: [.client], on: context.connection)
        }
        return handlers
    }
}
