import NIOCore
import ServiceKitCore

/// One entry read from a stream.
package struct StreamEntry: Sendable, Equatable {
    package var id: String
    package var fields: [String: String]
}

/// The commands the architecture names, typed. Anything else goes through `send`.
extension RedisClient {
    /// `XADD key MAXLEN ~ n * field value …`; returns the entry id.
    @discardableResult
    package func xadd(_ stream: String, maxLength: Int?, fields: [(String, String)]) async throws -> String {
        let reply = try await send(Self.xaddCommand(stream, maxLength: maxLength, fields: fields))
        guard let id = reply.string else { throw RedisError.unexpectedReply("\(reply)") }
        return id
    }

    package static func xaddCommand(_ stream: String, maxLength: Int?, fields: [(String, String)]) -> [RedisArgument] {
        var arguments: [RedisArgument] = ["XADD", RedisArgument(stream)]
        if let maxLength { arguments += ["MAXLEN", "~", RedisArgument(maxLength)] }
        arguments.append("*")
        for (field, value) in fields { arguments += [RedisArgument(field), RedisArgument(value)] }
        return arguments
    }

    /// `XTRIM key MINID id`: drops the entries whose id is below `id` (ids are their time in ms);
    /// returns how many went. Exact, not `~`, so that nothing older stays behind in a partly
    /// trimmed node.
    @discardableResult
    package func xtrim(_ stream: String, minID: String) async throws -> Int {
        let reply = try await send("XTRIM", RedisArgument(stream), "MINID", RedisArgument(minID))
        guard let removed = reply.int else { throw RedisError.unexpectedReply("\(reply)") }
        return removed
    }

    /// `XGROUP CREATE … MKSTREAM`; an existing group is fine.
    package func xgroupCreate(_ stream: String, group: String, startID: String = "0") async throws {
        do {
            try await send("XGROUP", "CREATE", RedisArgument(stream), RedisArgument(group), RedisArgument(startID), "MKSTREAM")
        } catch RedisError.server(let message) where message.hasPrefix("BUSYGROUP") {
            return
        }
    }

    /// `XREADGROUP GROUP g c COUNT n BLOCK ms STREAMS key >`; an empty array when the block times out.
    package func xreadgroup(_ stream: String, group: String, consumer: String, count: Int, block: Duration?) async throws -> [StreamEntry] {
        var arguments: [RedisArgument] = ["XREADGROUP", "GROUP", RedisArgument(group), RedisArgument(consumer), "COUNT", RedisArgument(count)]
        var extra = TimeAmount.zero
        if let block {
            let ms = Int(block.components.seconds * 1000 + block.components.attoseconds / 1_000_000_000_000_000)
            arguments += ["BLOCK", RedisArgument(ms)]
            extra = .milliseconds(Int64(ms))
        }
        arguments += ["STREAMS", RedisArgument(stream), ">"]
        let reply = try await send(arguments, extraTimeout: extra)
        guard let streams = reply.array else { return [] }
        return streams.flatMap { stream -> [StreamEntry] in
            guard let parts = stream.array, parts.count == 2, let entries = parts[1].array else { return [] }
            return entries.compactMap(Self.entry)
        }
    }

    /// `XAUTOCLAIM key group consumer min-idle start COUNT n`: takes over entries another consumer left
    /// pending. Returns the claimed entries and the cursor to continue from ("0-0" when done).
    package func xautoclaim(_ stream: String, group: String, consumer: String, minIdle: Duration, start: String = "0-0", count: Int = 100) async throws -> (entries: [StreamEntry], next: String) {
        let ms = Int(minIdle.components.seconds * 1000 + minIdle.components.attoseconds / 1_000_000_000_000_000)
        let reply = try await send("XAUTOCLAIM", RedisArgument(stream), RedisArgument(group), RedisArgument(consumer), RedisArgument(ms), RedisArgument(start), "COUNT", RedisArgument(count))
        guard let parts = reply.array, parts.count >= 2, let next = parts[0].string, let entries = parts[1].array else {
            throw RedisError.unexpectedReply("\(reply)")
        }
        // Entries deleted from the stream while pending come back as nil.
        return (entries.compactMap(Self.entry), next)
    }

    /// How many times the group has delivered one entry (`XPENDING key group id id 1`).
    package func deliveryCount(_ stream: String, group: String, id: String) async throws -> Int {
        let reply = try await send("XPENDING", RedisArgument(stream), RedisArgument(group), RedisArgument(id), RedisArgument(id), "1")
        guard let rows = reply.array, let row = rows.first?.array, row.count >= 4, let count = row[3].int else { return 0 }
        return count
    }

    /// Sets how many times the group counts one entry delivered, keeping it with `consumer`
    /// (`XCLAIM key group consumer 0 id RETRYCOUNT n JUSTID`, which counts no delivery itself).
    package func setDeliveryCount(_ stream: String, group: String, consumer: String, id: String, to count: Int) async throws {
        _ = try await send(
            "XCLAIM", RedisArgument(stream), RedisArgument(group), RedisArgument(consumer), "0", RedisArgument(id), "RETRYCOUNT", RedisArgument(count), "JUSTID")
    }

    @discardableResult
    package func xack(_ stream: String, group: String, ids: [String]) async throws -> Int {
        guard !ids.isEmpty else { return 0 }
        let reply = try await send(["XACK", RedisArgument(stream), RedisArgument(group)] + ids.map { RedisArgument($0) })
        return reply.int ?? 0
    }

    /// Entries of the group not yet acknowledged.
    package func pendingCount(_ stream: String, group: String) async throws -> Int {
        let reply = try await send("XPENDING", RedisArgument(stream), RedisArgument(group))
        return reply.array?.first?.int ?? 0
    }

    package func xlen(_ stream: String) async throws -> Int {
        try await send("XLEN", RedisArgument(stream)).int ?? 0
    }

    /// Entries of `stream` in id order from `start` on (`XRANGE key start + COUNT n`): `-` for the
    /// first, an id, or `(` and an id for those after it.
    package func xrange(_ stream: String, from start: String = "-", count: Int = 1_000) async throws -> [StreamEntry] {
        let reply = try await send("XRANGE", RedisArgument(stream), RedisArgument(start), "+", "COUNT", RedisArgument(count))
        return (reply.array ?? []).compactMap(Self.entry)
    }

    /// `PUBLISH`; returns how many subscribers received it.
    @discardableResult
    package func publish(_ channel: String, _ message: String) async throws -> Int {
        try await send("PUBLISH", RedisArgument(channel), RedisArgument(message)).int ?? 0
    }

    /// `INCR` and, when the key is new, `PEXPIRE`, in one round trip of a Lua script, so a counter
    /// never lives forever even if the caller dies in between.
    package func incrementWithExpiry(_ key: String, window: Duration) async throws -> Int {
        let ms = Int(window.components.seconds * 1000 + window.components.attoseconds / 1_000_000_000_000_000)
        let reply = try await eval(
            "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n",
            keys: [key], arguments: [RedisArgument(ms)]
        )
        return reply.int ?? 0
    }

    /// Milliseconds until `key` expires, or nil when it has no expiry or does not exist.
    package func pttl(_ key: String) async throws -> Int? {
        let value = try await send("PTTL", RedisArgument(key)).int ?? -2
        return value >= 0 ? value : nil
    }

    /// Runs a Lua script by its SHA-1 (`EVALSHA`), loading it on `NOSCRIPT`.
    public func eval(_ script: String, keys: [String], arguments: [RedisArgument]) async throws -> RESPValue {
        let sha = LuaScript.sha1(script)
        let tail: [RedisArgument] = [RedisArgument(keys.count)] + keys.map { RedisArgument($0) } + arguments
        do {
            return try await send(["EVALSHA", RedisArgument(sha)] + tail)
        } catch RedisError.server(let message) where message.hasPrefix("NOSCRIPT") {
            return try await send(["EVAL", RedisArgument(script)] + tail)
        }
    }

    package static func entry(_ value: RESPValue) -> StreamEntry? {
        guard let parts = value.array, parts.count == 2, let id = parts[0].string else { return nil }
        var fields: [String: String] = [:]
        let flat = parts[1].array ?? []
        var index = 0
        while index + 1 < flat.count {
            if let key = flat[index].string, let value = flat[index + 1].string { fields[key] = value }
            index += 2
        }
        return StreamEntry(id: id, fields: fields)
    }
}
