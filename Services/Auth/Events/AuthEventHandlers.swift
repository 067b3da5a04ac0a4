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
            _ = try await accounts.changeRoles(of: user, adding: [.client], on: context.connection)
        }
        // A client with no coach left is no longer a client.
        handlers.on(ClientUnlinked.self) { event, context in
            guard !event.hasOtherCoach, let user = try await accounts.users.find(id: event.clientID, forUpdate: true, on: context.connection, logger: context.logger),
                user.roles.contains(.client)
            else { return }
            _ = try await accounts.changeRoles(of: user, removing: [.client], on: context.connection)
        }
        return handlers
    }
}
