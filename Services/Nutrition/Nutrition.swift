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
    /// Trend answers by diary, period and day, for the diary version they were computed from: read
    /// again while nothing in them changed, they cost one profile read. Two generations of
    /// `TREND_CACHE_SIZE` (1,000: about 3.5 KB for a month, so at most about 7 MB); none at 0.
    let trendAnswers: VersionedCache<TrendRoutes.AnswerKey, EncodedJSON>?
    let shares = ShareStore()
    let coaching = CoachLinkStore()
    /// Cairo draws off the event loops.
    let drawing: NIOThreadPool

    init(dependencies: ServiceDependencies, settings: NutritionSettings, drawing: NIOThreadPool) {
        postgres = dependencies.postgres
        self.settings = settings
        trendAnswers = settings.trendCacheSize > 0 ? VersionedCache(capacity: settings.trendCacheSize) : nil
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
