import ServiceKit

/// The social service's own settings, read with the common ones.
struct SocialSettings: Sendable {
    /// Follows, unfollows and follow requests one user may make in an hour (`429` past it).
    var followActionsPerHour: Int
    /// A follow (or request) notification from the same person is pushed live at most once in this
    /// window: following and unfollowing in a loop does not ring the target's phone each round.
    var repeatPushWindow: Duration
    /// How many avatars the process decodes at once, and how large one may be decoded
    /// (`IMAGE_DECODE_CONCURRENCY`, `IMAGE_DECODE_MAX_BYTES`).
    var imageDecoding: ImageDecoding

    /// `imageDecoding`, when given, stands for the one the settings describe (a test's).
    init(_ config: ServiceConfig, imageDecoding: ImageDecoding? = nil) throws {
        var env = EnvironmentReader(config.environment)
        followActionsPerHour = env.int("FOLLOW_ACTIONS_PER_HOUR", default: 200, range: 1...1_000_000)
        repeatPushWindow = .seconds(env.int("FOLLOW_NOTIFICATION_PUSH_WINDOW_SECONDS", default: 3_600, range: 0...604_800))
        let configured = ImageDecoding(reading: &env)
        self.imageDecoding = imageDecoding ?? configured
        try env.finish()
    }
}
