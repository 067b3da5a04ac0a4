import Foundation
import ServiceKit

/// How many event streams each user has open, counted across every gateway process in Redis: the
/// sorted set `sse:streams:<user>` holds each open stream's id, scored by its last heartbeat (the
/// server's clock). A stream whose process died stops beating and drops out after three heartbeats,
/// so a crash does not hold a user's slots.
struct StreamSlots: Sendable {
    let redis: RedisClient
    let maxPerUser: Int
    let heartbeat: Duration

    static func key(for user: UUID) -> String { "sse:streams:" + user.uuidString.lowercased() }

    /// A beat older than this many milliseconds is a stream that is gone.
    var staleAfter: Int { 3 * (Int(heartbeat.components.seconds) * 1_000 + Int(heartbeat.components.attoseconds / 1_000_000_000_000_000)) }

    /// Takes one of the user's slots for `stream`, unless they are all taken; in one script, so two
    /// processes cannot both take the last one.
    func claim(user: UUID, stream: String) async throws -> Bool {
        let reply = try await redis.eval(
            Self.claimScript, keys: [Self.key(for: user)], arguments: [RedisArgument(stream), RedisArgument(staleAfter), RedisArgument(maxPerUser)])
        return reply.int == 1
    }

    /// The stream's heartbeat: still open. A slot that is gone (it lapsed, Redis lost it or was
    /// away) is taken again while the user has room; false when they have none (another stream took
    /// it): the stream ends rather than take it back past the user's limit. Best effort otherwise:
    /// a missed beat or two (Redis away) is harmless.
    func touch(user: UUID, stream: String) async -> Bool {
        guard
            let reply = try? await redis.eval(
                Self.touchScript, keys: [Self.key(for: user)], arguments: [RedisArgument(stream), RedisArgument(staleAfter), RedisArgument(maxPerUser)])
        else { return true }
        return reply.int != 0
    }

    func release(user: UUID, stream: String) async {
        _ = try? await redis.send("ZREM", RedisArgument(Self.key(for: user)), RedisArgument(stream))
    }

    static let claimScript = """
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[2])))
        if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
        redis.call('ZADD', KEYS[1], string.format('%.0f', now), ARGV[1])
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        return 1
        """

    /// Renews the stream's beat; a slot no longer held is claimed again as `claimScript` does: 0
    /// when the user has no room for it.
    static let touchScript = """
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then
            redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[2])))
            if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
        end
        redis.call('ZADD', KEYS[1], string.format('%.0f', now), ARGV[1])
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        return 1
        """
}
