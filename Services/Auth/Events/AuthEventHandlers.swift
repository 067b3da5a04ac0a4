import Foundation
import Models
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens

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
            try await context.connection.checkedRun(
                "UPDATE users SET client_since = greatest(coalesce(client_since, \(context.envelope.occurredAt)), \(context.envelope.occurredAt)) WHERE id = \(user.id)",
                logger: context.logger)
            _ = try await accounts.changeRoles(of: user, adding: [.client], on: context.connection)
        }
        // A client with no coach left is no longer a client; an unlink from before the latest
        // acceptance (delivered late, after a retry) changes nothing.
        handlers.on(ClientUnlinked.self) { event, context in
            guard !event.hasOtherCoach, let user = try await accounts.users.find(id: event.clientID, forUpdate: true, on: context.connection, logger: context.logger),
                user.roles.contains(.client)
            else { return }
            let acceptedLater = try await context.connection.returnsRow(
                "SELECT 1 FROM users WHERE id = \(user.id) AND client_since > \(context.envelope.occurredAt)", logger: context.logger)
            guard !acceptedLater else { return }
            _ = try await accounts.changeRoles(of: user, removing: [.client], on: context.connection)
        }
        return handlers
    }
}
