import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents

/// Events from auth, social and invitations: a profile for each new account, the allergies meals
/// are checked against, who coaches whom, and nothing left of a deleted account.
struct NutritionEventHandlers {
    let nutrition: Nutrition

    var handlers: EventHandlers {
        var handlers = EventHandlers()
        let nutrition = self.nutrition
        handlers.on(UserRegistered.self) { event, context in
            try await nutrition.profiles.ensure(event.userID, on: context.connection, logger: context.logger)
        }
        handlers.on(ProfileUpdated.self) { event, context in
            try await nutrition.profiles.setAllergies(event.userID, event.allergies, on: context.connection, logger: context.logger)
        }
        handlers.on(InvitationAccepted.self) { event, context in
            try await nutrition.coaching.link(coach: event.coachID, client: event.clientID, on: context.connection, logger: context.logger)
        }
        handlers.on(ClientUnlinked.self) { event, context in
            try await nutrition.coaching.unlink(coach: event.coachID, client: event.clientID, on: context.connection, logger: context.logger)
        }
        handlers.on(UserDeleted.self) { event, context in
            try await Self.purge(event.userID, nutrition: nutrition, on: context.connection, logger: context.logger)
        }
        return handlers
    }

    /// Meals, metrics, profile and goals go; share links stay as rows without content, so they
    /// answer `410`.
    static func purge(_ user: UUID, nutrition: Nutrition, on connection: PostgresConnection, logger: Logger) async throws {
        try await nutrition.shares.forgetUser(user, on: connection, logger: logger)
        try await connection.checkedRun("DELETE FROM meals WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM body_metrics WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM calorie_goals WHERE user_id = \(user)", logger: logger)
        try await connection.checkedRun("DELETE FROM profiles WHERE user_id = \(user)", logger: logger)
        try await nutrition.coaching.forget(user, on: connection, logger: logger)
    }
}
