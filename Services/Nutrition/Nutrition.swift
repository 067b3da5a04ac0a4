import Foundation
import Logging
import NIOPosix
import PostgresNIO
import ServiceKit

/// The nutrition domain: its stores, its settings, the thread pool share cards are drawn on, and
/// the rules the routes share.
struct Nutrition: Sendable {
    let postgres: PostgresClient
    let settings: NutritionSettings
    let logger: Logger
    let profiles: DietProfileStore
    /// Each change of a profile or calorie goal as it commits, in every process: while it vouches,
    /// kept profiles are served without reading them (`dietProfile`).
    let profileChanges: ChangeFeed?
    let meals = MealStore()
    let metrics = BodyMetricStore()
    let trends = TrendStore()
    /// Trend responses by diary, period and day, for the diary version they were computed from: read
    /// again while nothing in them changed, they cost one profile read. Two generations of
    /// `TREND_CACHE_SIZE` (1,000: about 3.5 KB for a month, so at most about 7 MB); none at 0.
    let trendResponses: VersionedCache<TrendRoutes.ResponseKey, EncodedJSON>?
    let shares = ShareStore()
    let coaching = CoachLinkStore()
    let photos = MealPhotoStore()
    let analysisCounts = AnalysisCountStore()
    /// How many images this process decodes at once, and how large (meal photos).
    let imageDecoding: ImageDecoding
    /// The vision model meal photos are analysed by; nil when none is configured.
    let analyzer: MealAnalyzer?
    let foods = FoodStore()
    /// Food search responses by query and page. The table changes only with a migration, which a new
    /// release's processes run: a kept response stays right for the life of the process. Two
    /// generations of `FOOD_SEARCH_CACHE_SIZE`; none at 0.
    let foodSearches: VersionedCache<FoodRoutes.SearchKey, EncodedJSON>?
    /// Cairo draws off the event loops.
    let drawing: NIOThreadPool
    /// Share cards, drawn on `drawing` and counted.
    let cards: ShareCardPainter

    init(dependencies: ServiceDependencies, settings: NutritionSettings, drawing: NIOThreadPool) throws {
        postgres = dependencies.postgres
        if settings.profileCacheSize > 0 {
            let kept = VersionedCache<UUID, ProfileRecord>(capacity: settings.profileCacheSize)
            profiles = DietProfileStore(kept: kept)
            // The channel the migration's trigger functions name (`0011`).
            profileChanges = try ChangeFeed(
                forgetting: kept, channel: ChangeFeed.channel(schema: dependencies.config.database.schema, "diet_profiles"),
                database: dependencies.config.database, pool: dependencies.postgres, logger: dependencies.logger)
        } else {
            profiles = DietProfileStore()
            profileChanges = nil
        }
        self.settings = settings
        imageDecoding = settings.imageDecoding
        analyzer = MealAnalyzer.configured(settings.analyzer, http: VisionHTTP(httpClient: dependencies.httpClient))
        trendResponses = settings.trendCacheSize > 0 ? VersionedCache(capacity: settings.trendCacheSize) : nil
        foodSearches = settings.foodSearchCacheSize > 0 ? VersionedCache(capacity: settings.foodSearchCacheSize) : nil
        logger = dependencies.logger
        self.drawing = drawing
        let drawn = dependencies.metrics.makeCounter(descriptor: .init(metricName: "share_cards_drawn", unitName: "total", helpText: "Share cards drawn (each is kept with its link once drawn)"))
        cards = ShareCardPainter(pool: drawing, drawn: { drawn.increment() })
    }

    /// The user's profile, with today's calorie goal, for a request outside a transaction: as kept
    /// while the change feed vouches that it has not changed since it was read, else read on
    /// `connection` (and kept). A change made through another replica is seen once its announcement
    /// arrives, normally within a millisecond of its commit and at most two heartbeats of the feed
    /// after it; one made here, as soon as it commits.
    func dietProfile(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> DietProfile {
        guard let kept = profiles.kept else { return try await profiles.find(user, on: connection, logger: logger) }
        let record: ProfileRecord
        if profileChanges?.vouches == true, let found = kept.latest(for: user) {
            record = found
        } else {
            record = try await profiles.recordKeeping(user, on: connection, logger: logger)
        }
        var profile = record.profile
        if let goal = record.goals.goal(on: profile.localDay(of: Date())) { profile.dailyCalorieGoal = goal }
        return profile
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
