import Foundation
import Models
import ServiceKitCore
import ServiceKitRedis

/// The live copy of an event, for the one user it is for. One Lua script appends it to the user's
/// capped stream `live:<user>` and publishes `<stream id> <envelope>` on `user:<user>`, so the id a
/// listener gets with a message is the entry a reader resumes after: whoever missed messages (a
/// client that reconnects, a subscriber whose connection dropped) reads them back from the stream,
/// each once. The stream keeps about `maxLength` entries and none older than `retention`: it is a
/// window for reconnecting, not a history (the durable one is the `events` stream).
///
/// Each entry also names the entry before it (`prev`), or for the first entry of a stream begun
/// afresh the retention horizon of that moment, written with the largest sequence (no entry has it)
/// so that it says the stream began there. A reader resuming after an id compares that with the
/// first entry it finds after the id: if the entry before that one is later than the id, something
/// in between was trimmed, and the reader must start over (`Resumption.reset`) rather than
/// silently miss it. So must a reader whose id the stream gave before it began afresh or vanished:
/// Redis lost it (a restart without its data), and what followed the id may be lost with it.
public enum LiveStream {
    /// `MAXLEN ~` of each user's stream.
    public static let maxLength = 200
    /// Entries older than this are dropped (`XTRIM … MINID`), and a stream nobody adds to expires.
    package static let retention: Duration = .seconds(86_400)
    /// Every user's channel, for one pattern subscription (`PSUBSCRIBE`).
    public static let channelPattern = "user:*"

    static var retentionMilliseconds: UInt64 { UInt64(retention.components.seconds) * 1_000 }

    public static func key(for user: UUID) -> String { "live:" + user.uuidString.lowercased() }
    public static func channel(for user: UUID) -> String { "user:" + user.uuidString.lowercased() }

    /// The user a `user:<id>` channel is for.
    public static func user(ofChannel channel: String) -> UUID? {
        guard channel.hasPrefix("user:") else { return nil }
        return UUID(parsing: String(channel.dropFirst(5)))
    }

    /// Appends the envelope to `user`'s live stream and publishes it on the user's channel, in one
    /// step on the server; returns the entry's id.
    @discardableResult
    package static func publish(envelope: String, type: String, to user: UUID, redis: RedisClient) async throws -> StreamID {
        let reply = try await redis.eval(
            publishScript, keys: [key(for: user)],
            arguments: [
                RedisArgument(channel(for: user)), RedisArgument(type), RedisArgument(envelope), RedisArgument(maxLength),
                RedisArgument(Int(retentionMilliseconds)),
            ])
        guard let text = reply.string, let id = StreamID(text) else { throw RedisError.unexpectedReply("\(reply)") }
        return id
    }

    /// The same step as a command, for a pipeline: the relay sends it with the batch it moves, so
    /// a live copy is sent (again, at worst) until the batch commits, never lost after it.
    /// Plain `EVAL`: a pipeline cannot fall back from `EVALSHA` when Redis lost its scripts.
    package static func publishCommand(envelope: String, type: String, to user: UUID) -> [RedisArgument] {
        [
            "EVAL", RedisArgument(publishScript), RedisArgument(1), RedisArgument(key(for: user)),
            RedisArgument(channel(for: user)), RedisArgument(type), RedisArgument(envelope), RedisArgument(maxLength),
            RedisArgument(Int(retentionMilliseconds)),
        ]
    }

    /// The server's clock (`TIME`) sets the horizon, so every process trims alike whatever its own
    /// clock says. `prev` is read before the entry is added; a stream that does not exist (never
    /// written, or expired a day after its last entry) starts from the horizon.
    static let publishScript = """
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        local horizon = string.format('%.0f', now - tonumber(ARGV[5])) .. '-0'
        local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
        local prev = string.format('%.0f', now - tonumber(ARGV[5])) .. '-18446744073709551615'
        if #newest > 0 then prev = newest[1][1] end
        local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[4], '*', 'type', ARGV[2], 'prev', prev, 'envelope', ARGV[3])
        redis.call('XTRIM', KEYS[1], 'MINID', horizon)
        redis.call('PEXPIRE', KEYS[1], ARGV[5])
        redis.call('PUBLISH', ARGV[1], id .. ' ' .. ARGV[3])
        return id
        """

    /// A message as published on `user:<id>`: the entry's id, one space, the envelope.
    public struct Message: Sendable, Equatable {
        public var id: StreamID
        public var envelope: String

        public init(id: StreamID, envelope: String) {
            self.id = id
            self.envelope = envelope
        }

        public init?(payload: [UInt8]) {
            guard let space = payload.firstIndex(of: UInt8(ascii: " ")),
                let id = StreamID(String(decoding: payload[..<space], as: UTF8.self))
            else { return nil }
            self.init(id: id, envelope: String(decoding: payload[(space + 1)...], as: UTF8.self))
        }
    }

    /// One entry of a user's live stream.
    public struct Entry: Sendable, Equatable {
        public var id: StreamID
        /// The entry before this one when it was added, or the retention horizon then if the stream
        /// was new. Nil only for an entry written some other way.
        public var previous: StreamID?
        public var type: String
        public var envelope: String

        public init(id: StreamID, previous: StreamID?, type: String, envelope: String) {
            self.id = id
            self.previous = previous
            self.type = type
            self.envelope = envelope
        }
    }

    /// Where a reader that had everything up to an id goes on from.
    public enum Resumption: Sendable, Equatable {
        /// These entries, oldest first (none: it missed nothing).
        case replay([Entry])
        /// Entries it missed are gone, or the id was never given: it must start over.
        case reset
    }

    /// A user's stream as one script read it, at one instant.
    public struct Backlog: Sendable, Equatable {
        /// The server's clock, in milliseconds.
        package var serverTime: UInt64
        /// The newest entry's id; nil when the stream does not exist.
        public var last: StreamID?
        /// The entries after the id asked for, oldest first.
        package var entries: [Entry]
        /// The entries, anywhere in the stream, whose type was asked for.
        public var matching: [Entry]

        public init(serverTime: UInt64, last: StreamID?, entries: [Entry], matching: [Entry]) {
            self.serverTime = serverTime
            self.last = last
            self.entries = entries
            self.matching = matching
        }

        /// Where a reader that has nothing yet stands: after the newest entry, or before now.
        public var end: StreamID { last ?? StreamID.justBefore(milliseconds: serverTime) }

        /// What a reader that had everything up to `after` (the `entries` were read after it) must
        /// do. Trimming takes the oldest entries and never the newest, so what the reader missed is
        /// all here unless the entry before the first one here is later than `after`.
        public func resumption(after: StreamID) -> Resumption {
            // An id a reader was given as the end of a stream with no entries (`end`), not one of
            // the stream's own: it missed nothing that was there before.
            let givenAsEnd = after.sequence == .max
            if let last {
                // An id this stream never gave.
                if after > last { return .reset }
            } else {
                // The stream is gone. One nobody wrote to expires a whole retention after its last
                // entry, so an entry's id within the retention means Redis lost the stream: what
                // came after that id may be lost with it.
                guard givenAsEnd, after.milliseconds <= serverTime, after.milliseconds + LiveStream.retentionMilliseconds >= serverTime else { return .reset }
                return .replay([])
            }
            guard let first = entries.first else { return .replay([]) }
            if let previous = first.previous {
                if previous > after { return .reset }
                // The stream began afresh after an entry the reader had: lost with the old stream.
                if previous.sequence == .max, !givenAsEnd { return .reset }
            }
            return .replay(entries)
        }
    }

    /// Reads `user`'s stream: the entries after `after` (at most 1,000, more than the stream keeps),
    /// and, when `types` are given, every entry of those types.
    public static func read(for user: UUID, after: StreamID?, matching types: [String] = [], redis: RedisClient) async throws -> Backlog {
        // `(id` asks for what follows the id; for the very last id there is nothing to ask for.
        let start = after.flatMap { $0.milliseconds == .max ? nil : $0.description } ?? ""
        let reply = try await redis.eval(readScript, keys: [key(for: user)], arguments: [RedisArgument(start)] + types.map { RedisArgument($0) })
        guard let parts = reply.array, parts.count == 4, let now = parts[0].string.flatMap({ UInt64($0) }) else {
            throw RedisError.unexpectedReply("\(reply)")
        }
        return Backlog(
            serverTime: now, last: parts[1].string.flatMap { StreamID($0) },
            entries: (parts[2].array ?? []).compactMap(entry), matching: (parts[3].array ?? []).compactMap(entry))
    }

    static let readScript = """
        local time = redis.call('TIME')
        local now = time[1] .. string.format('%03d', math.floor(tonumber(time[2]) / 1000))
        local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
        local last = false
        if #newest > 0 then last = newest[1][1] end
        local after = {}
        if ARGV[1] ~= '' then after = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', 1000) end
        local matching = {}
        if #ARGV > 1 then
            local wanted = {}
            for i = 2, #ARGV do wanted[ARGV[i]] = true end
            for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
                local fields = entry[2]
                for j = 1, #fields, 2 do
                    if fields[j] == 'type' then
                        if wanted[fields[j + 1]] then table.insert(matching, entry) end
                        break
                    end
                end
            end
        end
        return {now, last, after, matching}
        """

    static func entry(_ value: RESPValue) -> Entry? {
        guard let raw = RedisClient.entry(value), let id = StreamID(raw.id), let type = raw.fields["type"], let envelope = raw.fields["envelope"] else {
            return nil
        }
        return Entry(id: id, previous: raw.fields["prev"].flatMap { StreamID($0) }, type: type, envelope: envelope)
    }
}
