import ServiceKit

/// The nutrition service's own settings, read with the common ones.
struct NutritionSettings: Sendable {
    /// The name on share cards.
    var appName: String
    /// Where the API is reached from outside (the gateway): share links point there.
    var publicAPIURL: String
    /// The shared meal's page (`APP_NAME`, `PAGE_ACCENT_COLOR`).
    var pages: PageSettings
    /// How long a share link works.
    var shareTTLDays: Int
    /// Trend responses kept per process, in each of two generations; 0 keeps none.
    var trendCacheSize: Int
    /// Food search responses each process keeps (`Nutrition.foodSearches`); 0 keeps none.
    var foodSearchCacheSize: Int
    /// Diet profiles kept per process, in each of two generations, served while the change feed
    /// vouches for them; 0 keeps none (every meal post reads its profile).
    var profileCacheSize: Int
    /// The largest meal photo taken (`MEAL_PHOTO_MAX_BYTES`, 10 MiB): a larger one is `413`.
    var mealPhotoMaxBytes: Int
    /// How many images are decoded at once, and how large (`IMAGE_DECODE_CONCURRENCY`,
    /// `IMAGE_DECODE_MAX_BYTES`), as in social, with a larger default budget.
    var imageDecoding: ImageDecoding
    /// The default decode budget of one meal photo: 96 MiB.
    static let mealPhotoMaxDecodedBytes = 96 << 20
    /// The vision model meal photos are analysed by (`ANALYZER_*`); off when unset.
    var analyzer: AnalyzerSettings

    init(_ config: ServiceConfig) throws {
        var env = EnvironmentReader(config.environment)
        appName = env.string("APP_NAME", default: "Food Backend")
        let url = env.string("PUBLIC_API_URL", default: env.string("APP_BASE_URL", default: "http://127.0.0.1:8080"), requiredInProduction: true)
        publicAPIURL = url.hasSuffix("/") ? String(url.dropLast()) : url
        shareTTLDays = env.int("SHARE_TTL_DAYS", default: 7, range: 1...365)
        trendCacheSize = env.int("TREND_CACHE_SIZE", default: 1_000, range: 0...100_000)
        profileCacheSize = env.int("PROFILE_CACHE_SIZE", default: 10_000, range: 0...1_000_000)
        foodSearchCacheSize = env.int("FOOD_SEARCH_CACHE_SIZE", default: 500, range: 0...100_000)
        pages = PageSettings(reading: &env)
        mealPhotoMaxBytes = env.int("MEAL_PHOTO_MAX_BYTES", default: 10 << 20, range: (64 << 10)...(64 << 20))
        // A phone's 24-megapixel HEIC (5712 × 4284) decodes whole, 73 MB: libheif cannot decode it
        // smaller, as libjpeg does a JPEG.
        imageDecoding = ImageDecoding(reading: &env, defaultMaxDecodedBytes: Self.mealPhotoMaxDecodedBytes)
        analyzer = AnalyzerSettings(reading: &env)
        try env.finish()
    }
}
