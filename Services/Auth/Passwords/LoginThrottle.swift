import Crypto
import Foundation
import Logging
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens

/// Counts failed password checks in Redis, per account and per client IP, in fixed windows, so that
/// every replica sees the same counts. An attempt is counted *before* the password is checked (and
/// uncounted when it succeeds), so a burst of parallel guesses cannot all slip past the limit while
/// bcrypt runs. A success clears only that account's count: an attacker's failures against other
/// accounts from the same IP still count.
///
/// `scope` keeps separate counts for separate doors: `login` (by email) and `reauth` (the password
/// asked again by password change and account deletion, by user id), so that guesses with a stolen
/// access token cannot lock the owner out of signing in.
///
/// If Redis cannot be reached the attempt is let through (and logged): sign-in stays available, and
/// bcrypt still bounds the guessing rate.
struct LoginThrottle: Sendable {
    struct Limits: Sendable {
        var perAccount: Int
        var perIP: Int
        var window: Duration
    }

    let redis: RedisClient
    let limits: Limits
    let logger: Logger
    var scope = "login"

    static func hashed(_ account: String) -> String {
        // Hashed so that Redis never holds the addresses.
        SHA256.hash(data: Data(account.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    func accountKey(_ account: String) -> String { "auth:\(scope)-failures:account:" + Self.hashed(account) }
    /// By the address's /64 for IPv6 (`TrustedProxies.limitKey`): one subscriber's network.
    func ipKey(_ ip: String) -> String { "auth:\(scope)-failures:ip:" + TrustedProxies.limitKey(ip) }

    private static let reserve = """
        local a = tonumber(redis.call('GET', KEYS[1]) or '0')
        local i = tonumber(redis.call('GET', KEYS[2]) or '0')
        if a >= tonumber(ARGV[1]) then return {1, redis.call('PTTL', KEYS[1])} end
        if i >= tonumber(ARGV[2]) then return {2, redis.call('PTTL', KEYS[2])} end
        if redis.call('INCR', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
        if redis.call('INCR', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
        return {0, 0}
        """

    private static let release = """
        redis.call('DEL', KEYS[1])
        local i = tonumber(redis.call('GET', KEYS[2]) or '0')
        if i > 0 then redis.call('DECR', KEYS[2]) end
        return 0
        """

    /// Counts the attempt as a failure until `succeeded` says otherwise; throws 429
    /// `too_many_attempts` (with `Retry-After`) when either count is already at its limit.
    func begin(account: String, ip: String) async throws {
        let windowMS = Int(limits.window.components.seconds * 1000)
        let reply: RESPValue
        do {
            reply = try await redis.eval(
                Self.reserve, keys: [accountKey(account), ipKey(ip)],
                arguments: [RedisArgument(limits.perAccount), RedisArgument(limits.perIP), RedisArgument(windowMS)])
        } catch {
            logger.warning("login throttle unavailable; attempt allowed", metadata: ["error": "\(error)", "scope": "\(scope)"])
            return
        }
        let parts = reply.array ?? []
        switch parts.first?.int ?? 0 {
        case 1: throw APIError.tooManyRequests("Too many failed attempts for this account.", code: "too_many_attempts", ttlMilliseconds: parts.last?.int)
        case 2: throw APIError.tooManyRequests("Too many failed attempts from this address.", code: "too_many_attempts", ttlMilliseconds: parts.last?.int)
        default: return
        }
    }

    /// The password was right: the account's count starts over and this attempt leaves the IP's.
    func succeeded(account: String, ip: String) async {
        do {
            _ = try await redis.eval(Self.release, keys: [accountKey(account), ipKey(ip)], arguments: [])
        } catch {
            logger.warning("login throttle not released", metadata: ["error": "\(error)", "scope": "\(scope)"])
        }
    }
}
