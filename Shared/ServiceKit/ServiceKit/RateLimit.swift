import Logging
import ServiceKitCore
import ServiceKitHTTP
import ServiceKitRedis

/// A fixed-window limit counted in Redis: `429` with `Retry-After` (the counter's time left) past
/// `max` in `window`. Every replica counts in the same key.
public struct RateLimit: Sendable {
    /// What happens while Redis cannot be reached: `allow` lets the request through (logged), for
    /// limits that are a nuisance guard; `refuse` answers `503`, for limits that guard a secret.
    public enum WhenUnavailable: Sendable { case allow, refuse }

    public var window: Duration
    public var max: Int
    public var code: String
    package var whenUnavailable: WhenUnavailable

    public init(max: Int, per window: Duration, code: String = "rate_limited", whenUnavailable: WhenUnavailable) {
        self.window = window
        self.max = max
        self.code = code
        self.whenUnavailable = whenUnavailable
    }

    /// Counts one use under `key`; throws the `429` (`detail` plus when to try again) past the limit.
    public func count(_ key: String, detail: String, redis: RedisClient, logger: Logger) async throws {
        let count: Int
        do {
            count = try await redis.incrementWithExpiry(key, window: window)
        } catch {
            logger.warning("rate limit unavailable", metadata: ["key": "\(key)", "error": "\(error)"])
            if whenUnavailable == .allow { return }
            throw APIError(.serviceUnavailable, code: "service_unavailable", detail: "Try again shortly.")
        }
        guard count > max else { return }
        throw APIError.tooManyRequests(detail, code: code, ttlMilliseconds: (try? await redis.pttl(key)) ?? nil)
    }
}
