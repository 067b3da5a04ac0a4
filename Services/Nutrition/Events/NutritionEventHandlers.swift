import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Events from auth, social, invitations and entitlements: a profile for each new account, the
/// allergies meals are checked against, who coaches whom, each user's caps, and nothing left of a
/// deleted account.
struct NutritionEventHandlers {
    let nutrition: Nutrition

    var handlers: EventHandlers {
        var handlers = EventHandlers()
        let nutrition = self.nutrition
        // A late event about a deleted account makes nothing again; one handled while the account's
        // deletion runs waits for it (`holdLiveAccount`).
        @Sendable func deleted(_ user: UUID, _ context: EventContext) async throws -> Bool {
            try await !context.connection.holdLiveAccount(user, logger: context.logger)
        }
        handlers.on(UserRegistered.self) { event, context in
            guard try await !deleted(event.userID, context) else { return }
            try await nutrition.profiles.ensure(event.userID, on: context.connection, logger: context.logger)
        }
        // The allergies as social's latest event says: an older one delivered late changes nothing.
        handlers.on(ProfileUpdated.self) { event, context in
            guard try await !deleted(event.userID, context), try await context.isLatest("profile", of: event.userID, among: "social") else { return }
            try await nutrition.profiles.setAllergies(event.userID, event.allergies, on: context.connection, logger: context.logger)
        }
        handlers.on(InvitationAccepted.self) { event, context in
            guard try await !deleted(event.clientID, context), try await !deleted(event.coachID, context) else { return }
            try await nutrition.coaching.link(
                coach: event.coachID, client: event.clientID, order: EventOrder(context.envelope, among: "invitations"), on: context.connection, logger: context.logger)
        }
        handlers.on(ClientUnlinked.self) { event, context in
            // A deleted account's purge removed its links, and its tombstone keeps a late acceptance
            // from linking again: nothing is recorded that would name it.
            guard try await !deleted(event.clientID, context), try await !deleted(event.coachID, context) else { return }
            try await nutrition.coaching.unlink(
                coach: event.coachID, client: event.clientID, order: EventOrder(context.envelope, among: "invitations"), on: context.connection, logger: context.logger)
        }
        // The address's owner proved it for the first time (disowning, or a reset of an account
        // nobody had proven): the diary the account's maker kept goes, and the account starts afresh.
        handlers.on(UserPasswordChanged.self) { event, context in
            guard event.makerDropped else { return }
            // Exclusive from the start: taking it shared first, then exclusive, can deadlock with another.
            try await context.connection.holdAccountForDeletion(event.userID, logger: context.logger)
            guard try await !context.connection.isDeletedAccount(event.userID, logger: context.logger) else { return }
            try await Self.dropMakers(
                event.userID, order: EventOrder(context.envelope, among: "invitations"), nutrition: nutrition, on: context.connection, logger: context.logger)
            try await context.connection.forgetKeptAnswers(of: event.userID, madeBefore: context.envelope.occurredAt, logger: context.logger)
        }
        // The caps of photo analyses: entitlements' catalogue, learned from its events.
        let allowance = AllowanceStore()
        handlers.on(EntitlementChanged.self) { event, context in
            guard try await !deleted(event.userID, context) else { return }
            try await allowance.record(event, order: EventOrder(context.envelope, among: "entitlements"), on: context.connection, logger: context.logger)
        }
        handlers.on(EntitlementCatalogChanged.self) { event, context in
            try await allowance.recordDefaults(event, order: EventOrder(context.envelope, among: "entitlements"), on: context.connection, logger: context.logger)
        }
        handlers.on(UserDeleted.self) { event, context in
            try await Self.purge(event.userID, nutrition: nutrition, on: context.connection, logger: context.logger)
        }
        return handlers
    }

    /// What the account's maker set up, once the address's owner has proven it: meals, weight and
    /// ketones, the diet profile and goals (a profile with the defaults takes its place), the share
    /// links (rows without content, answering `410`), the photo analyses counted against the day's
    /// allowance, and the coach links on either side, ended at `order` so that an acceptance from
    /// before, delivered late, does not link again.
    static func dropMakers(_ user: UUID, order: EventOrder, nutrition: Nutrition, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.holdAccountForDeletion(user, logger: logger)
        // Meals before share links: a link being made holds its meal until it commits, and is then
        // found here.
        try await connection.checkedRun("DELETE FROM meals WHERE user_id = \(user)", logger: logger)
        try await nutrition.shares.forgetUser(user, on: connection, logger: logger)
        try await connection.checkedRun("DELETE FROM body_metrics WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM calorie_goals WHERE user_id = \(user)", logger: logger)
        try await nutrition.analysisCounts.forget(user, on: connection, logger: logger)
        try await connection.checkedRun("DELETE FROM profiles WHERE user_id = \(user)", logger: logger)
        try await nutrition.profiles.ensure(user, on: connection, logger: logger)
        nutrition.profiles.forgetKeptAfterCommit(user)
        try await nutrition.coaching.endAll(of: user, order: order, on: connection, logger: logger)
    }

    /// Meals, metrics, profile and goals go; share links stay as rows without content, so they
    /// answer `410`.
    static func purge(_ user: UUID, nutrition: Nutrition, on connection: PostgresConnection, logger: Logger) async throws {
        // An analysis storing its meal holds the account until it commits (`holdLiveAccount`), and is
        // then found here; one storing after finds the tombstone. Meals before share links: a link
        // being made holds its meal until it commits.
        try await connection.holdAccountForDeletion(user, logger: logger)
        try await connection.checkedRun("DELETE FROM meals WHERE user_id = \(user)", logger: logger)
        try await nutrition.shares.forgetUser(user, on: connection, logger: logger)
        try await connection.checkedRun("DELETE FROM body_metrics WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM calorie_goals WHERE user_id = \(user)", logger: logger)
        // Also left out at the commit by the triggers of the deletions above, which find no profile.
        try await connection.checkedRun("DELETE FROM diary_versions WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM profiles WHERE user_id = \(user)", logger: logger)
        nutrition.profiles.forgetKeptAfterCommit(user)
        try await nutrition.coaching.forget(user, on: connection, logger: logger)
        try await AllowanceStore().forget(user, on: connection, logger: logger)
        try await nutrition.analysisCounts.forget(user, on: connection, logger: logger)
        try await connection.recordDeletedAccount(user, logger: logger)
    }
}
