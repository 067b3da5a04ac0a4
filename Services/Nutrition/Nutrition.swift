import Foundation
import Logging
import Models
import NIOPosix
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP

/// The nutrition domain: its stores, its settings, the thread pool share cards are drawn on, and
/// the rules the routes share.
struct Nutrition: Sendable {
    let postgres: PostgresClient
    let settings: NutritionSettings
    let logger: Logger
    let profiles = DietProfileStore()
    let meals = MealStore()
    let metrics = BodyMetricStore()
    let trends = TrendStore()
    let shares = ShareStore()
    let coaching = CoachLinkStore()
    /// Cairo draws off the event loops.
    let drawing: NIOThreadPool

    init(dependencies: ServiceDependencies, settings: NutritionSettings, drawing: NIOThreadPool) {
        postgres = dependencies.postgres
        self.settings = settings
        logger = dependencies.logger
        self.drawing = drawing
    }

    /// Whose diary a route reads: the caller's own, or a client's for their linked coach. Anyone
    /// else (and a coach after the link ended) is `404`, as if the client did not exist.
    func diaryOwner(_ context: AuthenticatedContext, on connection: PostgresConnection) async throws -> UUID {
        guard let text = context.parameters.get("client_user_id") else { return context.caller.userID }
        guard let client = UUID(parsing: text),
            try await coaching.isLinked(coach: context.caller.userID, client: client, on: connection, logger: context.logger)
        else { throw APIError.notFound("No such client.", code: "client_not_found") }
        return client
    }
}
