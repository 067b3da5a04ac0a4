import Crypto
import Foundation
import Logging
import ServiceKit

/// Counts failed logins in Redis, per account and per client IP, in fixed windows, so that every
/// replica sees the same counts. A success clears only that account's count: an attacker's failures
/// against other accounts from the same IP still count.
///
/// If Redis cannot be reached the check lets the attempt through (and logs it): sign-in stays
/// available, and bcrypt still bounds the guessing rate.
struct LoginThrottle: Sendable {
    struct Limits: Sendable {
        var perAccount: Int
        var perIP: Int
        var window: Duration
    }

    let redis: RedisClient
    let limits: Limits
    let logger: Logger

    static func accountKey(_ email: String) -> String {
        // Hashed so that Redis never holds the addresses.
        "auth:login-failures:account:" + SHA256.hash(data: Data(email.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    static func ipKey(_ ip: String) -> String { "auth:login-failures:ip:" + ip }

    /// Throws 429 `too_many_attempts` (with `Retry-After`) when either count is at its limit.
    func check(email: String, ip: String) async throws {
        let keys = [Self.accountKey(email), Self.ipKey(ip)]
        let replies: [RESPValue]
        do {
            replies = try await redis.pipeline(keys.flatMap { [["GET", RedisArgument($0)], ["PTTL", RedisArgument($0)]] })
        } catch {
            logger.warning("login throttle unavailable; attempt allowed", metadata: ["error": "\(error)"])
            return
        }
        let accountCount = replies[0].string.flatMap(Int.init) ?? 0
        let ipCount = replies[2].string.flatMap(Int.init) ?? 0
        if accountCount >= limits.perAccount {
            throw Self.refusal("Too many failed sign-ins for this account.", ttl: replies[1].int)
        }
        if ipCount >= limits.perIP {
            throw Self.refusal("Too many failed sign-ins from this address.", ttl: replies[3].int)
        }
    }

    private static func refusal(_ detail: String, ttl: Int?) -> APIError {
        let seconds = max(1, ((ttl ?? 1_000) + 999) / 1_000)
        return .tooManyRequests("\(detail) Try again in \(seconds) s.", code: "too_many_attempts", retryAfterSeconds: seconds)
    }

    func recordFailure(email: String, ip: String) async {
        do {
            async let account = redis.incrementWithExpiry(Self.accountKey(email), window: limits.window)
            async let address = redis.incrementWithExpiry(Self.ipKey(ip), window: limits.window)
            _ = try await (account, address)
        } catch {
            logger.warning("login failure not counted", metadata: ["error": "\(error)"])
        }
    }

    func recordSuccess(email: String) async {
        _ = try? await redis.send("DEL", RedisArgument(Self.accountKey(email)))
    }
}
