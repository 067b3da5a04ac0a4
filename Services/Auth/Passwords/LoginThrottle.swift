import Crypto
import Foundation
import Logging
import ServiceKit
import Synchronization

/// Counts failed password checks, in fixed windows, in three ways, so that a guesser is stopped
/// without handing a stranger the power to lock an owner out:
///
/// - per account *and* client address (`perAccountAndIP`): the hard block. A guesser at one address
///   is refused (429) after a few failures; the owner at any other address is not.
/// - per client address (`perIP`): the hard block of an address guessing across many accounts.
/// - per account across every address (`slowAfter`): never a refusal. Past it, each further attempt
///   for the account waits before its password is checked (`delay`, doubling up to `maxDelay`): an
///   attacker with many addresses is slowed, and the owner's right password still signs in.
///
/// An attempt is counted *before* the password is checked (and uncounted when it succeeds), so a
/// burst of parallel guesses cannot all slip past a limit while bcrypt runs. A success clears the
/// account's counts; an attacker's failures against other accounts from the same address still count.
///
/// The counts live in Redis, shared by every replica. While Redis cannot be reached, each process
/// keeps the same counts in memory and enforces the same limits: an outage never means unlimited
/// guessing (with N replicas an attacker gets at most N times the limits until Redis is back).
///
/// `scope` keeps separate counts for separate doors: `login` (by email) and `reauth` (the password
/// asked again by password change and account deletion, by user id), so that guesses with a stolen
/// access token cannot slow or block the owner's sign-in.
struct LoginThrottle: Sendable {
    struct Limits: Sendable {
        var perAccountAndIP: Int
        var perIP: Int
        var slowAfter: Int
        var maxDelay: Duration
        var window: Duration
    }

    let redis: RedisClient
    let limits: Limits
    let logger: Logger
    var scope = "login"
    /// The counts while Redis is away.
    let local = LocalCounts()

    static func hashed(_ account: String) -> String {
        // Hashed so that Redis never holds the addresses.
        SHA256.hash(data: Data(account.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
    }

    func accountKey(_ account: String) -> String { "auth:\(scope)-failures:account:" + Self.hashed(account) }
    /// By the address's /64 for IPv6 (`TrustedProxies.limitKey`): one subscriber's network.
    func ipKey(_ ip: String) -> String { "auth:\(scope)-failures:ip:" + TrustedProxies.limitKey(ip) }
    func pairKey(_ account: String, _ ip: String) -> String { "auth:\(scope)-failures:pair:" + Self.hashed(account + "\n" + TrustedProxies.limitKey(ip)) }

    /// KEYS: pair, address, account. ARGV: the pair's and the address's limits, the window in ms.
    /// Returns {verdict, ttl ms, failures of the account before this attempt}: 1 the pair is blocked,
    /// 2 the address is; 0 counted.
    private static let reserve = """
        local p = tonumber(redis.call('GET', KEYS[1]) or '0')
        local i = tonumber(redis.call('GET', KEYS[2]) or '0')
        if p >= tonumber(ARGV[1]) then return {1, redis.call('PTTL', KEYS[1]), 0} end
        if i >= tonumber(ARGV[2]) then return {2, redis.call('PTTL', KEYS[2]), 0} end
        for n = 1, 3 do
            if redis.call('INCR', KEYS[n]) == 1 then redis.call('PEXPIRE', KEYS[n], ARGV[3]) end
        end
        return {0, 0, tonumber(redis.call('GET', KEYS[3])) - 1}
        """

    private static let release = """
        redis.call('DEL', KEYS[1])
        redis.call('DEL', KEYS[3])
        local i = tonumber(redis.call('GET', KEYS[2]) or '0')
        if i > 0 then redis.call('DECR', KEYS[2]) end
        return 0
        """

    /// Counts the attempt as a failure until `succeeded` says otherwise; throws 429
    /// `too_many_attempts` (with `Retry-After`) when the pair's or the address's count is at its
    /// limit, and waits first when the account's count is past `slowAfter`.
    func begin(account: String, ip: String) async throws {
        let keys = [pairKey(account, ip), ipKey(ip), accountKey(account)]
        let verdict: (code: Int, ttlMilliseconds: Int?, accountFailures: Int)
        do {
            let reply = try await redis.eval(
                Self.reserve, keys: keys,
                arguments: [RedisArgument(limits.perAccountAndIP), RedisArgument(limits.perIP), RedisArgument(Int(limits.window.components.seconds * 1000))])
            let parts = reply.array ?? []
            verdict = (parts.first?.int ?? 0, parts.count > 1 ? parts[1].int : nil, parts.count > 2 ? parts[2].int ?? 0 : 0)
        } catch {
            logger.warning("login throttle counting in memory: Redis unavailable", metadata: ["error": "\(error)", "scope": "\(scope)"])
            verdict = local.reserve(keys: keys, limits: limits)
        }
        switch verdict.code {
        case 1: throw APIError.tooManyRequests("Too many failed attempts for this account from this address.", code: "too_many_attempts", ttlMilliseconds: verdict.ttlMilliseconds)
        case 2: throw APIError.tooManyRequests("Too many failed attempts from this address.", code: "too_many_attempts", ttlMilliseconds: verdict.ttlMilliseconds)
        default:
            if let delay = delay(afterFailures: verdict.accountFailures) { try await Task.sleep(for: delay) }
        }
    }

    /// How long an attempt waits when the account already has `failures` in the window: nothing up to
    /// `slowAfter`, then 250 ms, doubling with each further failure, up to `maxDelay`.
    func delay(afterFailures failures: Int) -> Duration? {
        guard failures >= limits.slowAfter else { return nil }
        let doublings = min(failures - limits.slowAfter, 16)
        return min(.milliseconds(250 << doublings), limits.maxDelay)
    }

    /// The password was right: the account's counts start over and this attempt leaves the address's.
    func succeeded(account: String, ip: String) async {
        let keys = [pairKey(account, ip), ipKey(ip), accountKey(account)]
        local.release(keys: keys)
        do {
            _ = try await redis.eval(Self.release, keys: keys, arguments: [])
        } catch {
            logger.warning("login throttle not released in Redis", metadata: ["error": "\(error)", "scope": "\(scope)"])
        }
    }
}

/// `LoginThrottle`'s counts in this process, used while Redis is unreachable: the same keys, limits
/// and windows as the Lua scripts.
final class LocalCounts: Sendable {
    private struct Count {
        var value: Int
        var expires: ContinuousClock.Instant
    }

    private struct State {
        var counts: [String: Count] = [:]
        /// Expired counts are dropped when the map grows past this; it then doubles over what is
        /// left alive, so a flood of live counts is not scanned on every attempt.
        var purgeAt = 50_000
    }

    private let state = Mutex(State())

    func reserve(keys: [String], limits: LoginThrottle.Limits) -> (code: Int, ttlMilliseconds: Int?, accountFailures: Int) {
        let now = ContinuousClock.now
        return state.withLock { state in
            if state.counts.count > state.purgeAt {
                state.counts = state.counts.filter { $0.value.expires > now }
                state.purgeAt = max(50_000, state.counts.count * 2)
            }
            func current(_ key: String) -> Count? { state.counts[key].flatMap { $0.expires > now ? $0 : nil } }
            func ttl(_ count: Count) -> Int {
                let left = count.expires - now
                return Int(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)
            }
            if let pair = current(keys[0]), pair.value >= limits.perAccountAndIP { return (1, ttl(pair), 0) }
            if let address = current(keys[1]), address.value >= limits.perIP { return (2, ttl(address), 0) }
            let before = current(keys[2])?.value ?? 0
            for key in keys {
                var count = current(key) ?? Count(value: 0, expires: now + limits.window)
                count.value += 1
                state.counts[key] = count
            }
            return (0, nil, before)
        }
    }

    func release(keys: [String]) {
        let now = ContinuousClock.now
        state.withLock { state in
            state.counts[keys[0]] = nil
            state.counts[keys[2]] = nil
            if var address = state.counts[keys[1]], address.expires > now, address.value > 0 {
                address.value -= 1
                state.counts[keys[1]] = address
            }
        }
    }
}
