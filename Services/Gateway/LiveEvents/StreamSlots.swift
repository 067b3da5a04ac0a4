import Foundation
import ServiceKit

/// How many event streams each user has open, counted across every gateway process in Redis: the
/// sorted set `sse:streams:<user>` holds each open stream's slot (the microsecond it opened, then its id),
/// scored by its last heartbeat (the server's clock). A stream whose process died stops beating and
/// drops out after three heartbeats, so a crash does not hold a user's slots.
///
/// A stream whose client vanished without closing (an app suspended, a phone that changed networks)
/// goes on beating: its heartbeats fit in the kernel's buffers, and TCP gives up on the peer only
/// after many minutes. So a user with no room left is not refused: the new stream takes the slot
/// of the one open longest, which ends at its next beat (at once when both are in one process:
/// `LiveHub.makeRoom`). The device asking now is the one in use.
struct StreamSlots: Sendable {
    let redis: RedisClient
    let maxPerUser: Int
    let heartbeat: Duration

    static func key(for user: UUID) -> String { "sse:streams:" + user.uuidString.lowercased() }

    /// A beat older than this many milliseconds is a stream that is gone.
    var staleAfter: Int { 3 * (Int(heartbeat.components.seconds) * 1_000 + Int(heartbeat.components.attoseconds / 1_000_000_000_000_000)) }

    /// Takes one of the user's slots for the stream `id`, the longest-open stream's when they are all
    /// taken; in one script, so two processes cannot both take the last one. The slot's name, which
    /// `touch` and `release` take: the time it opened by Redis's clock, then `id`, so names sort by age.
    func claim(user: UUID, stream id: String) async throws -> String {
        let reply = try await redis.eval(
            Self.claimScript, keys: [Self.key(for: user)], arguments: [RedisArgument(id), RedisArgument(staleAfter), RedisArgument(maxPerUser)])
        guard let slot = reply.string else { throw RedisError.unexpectedReply("stream slot claim: \(reply)") }
        return slot
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
        local open = redis.call('ZRANGE', KEYS[1], 0, -1)
        local over = #open - tonumber(ARGV[3]) + 1
        if over > 0 then
            table.sort(open)
            for i = 1, over do redis.call('ZREM', KEYS[1], open[i]) end
        end
        local slot = string.format('%016.0f', tonumber(time[1]) * 1000000 + tonumber(time[2])) .. ':' .. ARGV[1]
        redis.call('ZADD', KEYS[1], string.format('%.0f', now), slot)
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        return slot
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
