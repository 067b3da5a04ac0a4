import Foundation
import ServiceKit

/// Events from auth: who exists (and at which address, for memberships by email), and nothing
/// personal left of a deleted account; from social: who blocks whom, for who may invite whom.
struct EntitlementsEventHandlers {
    let entitlements: Entitlements
    let spaces: SpaceStore

    var handlers: EventHandlers {
        var handlers = EventHandlers()
        let entitlements = self.entitlements
        let spaces = self.spaces
        let blocks = BlockStore()
        // A late event about a deleted account makes nothing again; one handled while the account's
        // deletion runs waits for it (`holdLiveAccount`), and then finds its tombstone.
        @Sendable func deleted(_ user: UUID, _ context: EventContext) async throws -> Bool {
            try await !context.connection.holdLiveAccount(user, logger: context.logger)
        }
        handlers.on(UserRegistered.self) { event, context in
            guard try await !deleted(event.userID, context) else { return }
            let email = EmailAddress.normalize(event.email)
            // No address is proven by a registration, whichever way it came: it is not found by
            // address, and its space invitations wait for auth's `user.email_verified`, or anyone
            // could register a colleague's address and take them. Apple and Google mark any address
            // verified, a company one its holder has since lost included; auth says when one counts.
            try await entitlements.store.ensureCustomer(event.userID, email: email, verified: false, on: context.connection, logger: context.logger)
        }
        handlers.on(UserEmailVerified.self) { event, context in
            guard try await !deleted(event.userID, context) else { return }
            let email = EmailAddress.normalize(event.email)
            // Invitations to the address are offered to the account from now on (`GET
            // /v1/spaces/invitations`); they stay pending until its holder accepts or declines, as
            // nobody is put in a space without saying yes.
            try await entitlements.store.ensureCustomer(event.userID, email: email, verified: true, on: context.connection, logger: context.logger)
        }
        // What the admin routes check a token's roles against (`Entitlements.liveAdmin`).
        let standings = AccountStandingStore()
        // Each as auth's latest event of it says, in the order auth's database gave them (a clock
        // that runs behind would drop a revocation): an older one delivered late changes nothing.
        handlers.on(UserRolesChanged.self) { event, context in
            guard try await !deleted(event.userID, context), try await context.isLatest("roles", of: event.userID, among: "auth") else { return }
            try await standings.rolesChanged(event.userID, roles: event.roles, at: context.envelope.occurredAt, on: context.connection, logger: context.logger)
        }
        handlers.on(UserStatusChanged.self) { event, context in
            guard try await !deleted(event.userID, context), try await context.isLatest("status", of: event.userID, among: "auth") else { return }
            try await standings.statusChanged(event.userID, disabled: event.disabled, at: context.envelope.occurredAt, on: context.connection, logger: context.logger)
        }
        // The address's owner proved it for the first time (disowning, or a reset of an account
        // nobody had proven): what the account's maker set up goes. Auth says so before it says the
        // address is proven, so invitations to the address are offered after this.
        handlers.on(UserPasswordChanged.self) { event, context in
            guard event.makerDropped, try await !deleted(event.userID, context) else { return }
            try await spaces.makerDropped(event.userID, on: context.connection, logger: context.logger)
            try await blocks.makerDropped(event.userID, on: context.connection, logger: context.logger)
            try await entitlements.announcingChanges(for: [event.userID], on: context.connection, logger: context.logger) {
                try await entitlements.store.releasePurchases(of: event.userID, on: context.connection, logger: context.logger)
                try await entitlements.store.forgetUsage(of: event.userID, on: context.connection, logger: context.logger)
            }
            try await context.connection.forgetKeptAnswers(of: event.userID, madeBefore: context.envelope.occurredAt, logger: context.logger)
        }
        // Social's blocks, in the order social gave them: a block ends the invitations pending
        // between the two, and stops new ones (`BlockStore`).
        handlers.on(BlockCreated.self) { event, context in
            let order = EventOrder(context.envelope, among: "social")
            guard try await blocks.record(blocker: event.blockerID, blocked: event.blockedID, blocking: true, order: order, on: context.connection, logger: context.logger)
            else { return }
            try await blocks.dropInvitations(between: event.blockerID, event.blockedID, on: context.connection, logger: context.logger)
        }
        handlers.on(BlockRemoved.self) { event, context in
            let order = EventOrder(context.envelope, among: "social")
            _ = try await blocks.record(blocker: event.blockerID, blocked: event.blockedID, blocking: false, order: order, on: context.connection, logger: context.logger)
        }
        handlers.on(UserDeleted.self) { event, context in
            // A request making rows of the account (a purchase's customer and subscription) holds it
            // until it commits (`EntitlementStore.ensureLiveCustomer`), and is then found below.
            try await context.connection.holdAccountForDeletion(event.userID, logger: context.logger)
            try await spaces.userDeleted(event.userID, on: context.connection, logger: context.logger)
            try await blocks.forget(event.userID, on: context.connection, logger: context.logger)
            try await entitlements.store.forget(event.userID, on: context.connection, logger: context.logger)
            entitlements.forgetKeptAfterCommit([event.userID])
        }
        return handlers
    }
}
