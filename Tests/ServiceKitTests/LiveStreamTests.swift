import Foundation
import Models
@testable import ServiceKitEvents
import ServiceKitHTTP
@testable import ServiceKitRedis
import Testing
import TestSupport

/// The live copy of events (`LiveStream`): the script the relay runs, what a reader resuming after an
/// id gets, and the ids themselves.
@Suite struct LiveStreamTests {
    @Test func streamIDsCompareAsNumbersAndParseStrictly() {
        #expect(StreamID("9-1")! < StreamID("10-0")!)
        #expect(StreamID("10-2")! > StreamID("10-1")!)
        #expect(StreamID("1700000000000-3") == StreamID(milliseconds: 1_700_000_000_000, sequence: 3))
        #expect(StreamID("18446744073709551615-18446744073709551615") == StreamID(milliseconds: .max, sequence: .max))
        for bad in ["", "5", "-", "+", "a-1", "1-", "-1", "1-2-3", " 1-2", "1-2 ", "18446744073709551616-0", "1.5-0", "0x1-0"] {
            #expect(StreamID(bad) == nil, "\(bad)")
        }
        #expect(StreamID.justBefore(milliseconds: 100) == StreamID(milliseconds: 99, sequence: .max))
        #expect(StreamID(milliseconds: 5, sequence: 7).description == "5-7")
    }

    static func entry(_ id: String, after previous: String?) -> LiveStream.Entry {
        LiveStream.Entry(id: StreamID(id)!, previous: previous.flatMap { StreamID($0) }, type: "t", envelope: "{}")
    }

    /// A reader gets the entries after its id unless the entry before the first of them is later
    /// than its id (something in between was trimmed), or its id was never given.
    @Test func aResumptionReplaysOrResets() {
        let now: UInt64 = 1_700_000_000_000
        let day = UInt64(86_400_000)
        let kept = [Self.entry("\(now - 30)-0", after: "\(now - 40)-0"), Self.entry("\(now - 20)-0", after: "\(now - 30)-0")]
        let backlog = LiveStream.Backlog(serverTime: now, last: StreamID("\(now - 20)-0"), entries: kept, matching: [])
        #expect(backlog.resumption(after: StreamID("\(now - 40)-0")!) == .replay(kept))
        // Asked for from between the two: nothing was between them either.
        #expect(backlog.resumption(after: StreamID("\(now - 35)-0")!) == .replay(kept))
        // The entry before the first kept one came after the id: it is gone.
        #expect(backlog.resumption(after: StreamID("\(now - 41)-0")!) == .reset)
        // Past the newest entry: never given.
        #expect(backlog.resumption(after: StreamID("\(now - 10)-0")!) == .reset)
        let caughtUp = LiveStream.Backlog(serverTime: now, last: StreamID("\(now - 20)-0"), entries: [], matching: [])
        #expect(caughtUp.resumption(after: StreamID("\(now - 20)-0")!) == .replay([]))
        #expect(caughtUp.end == StreamID("\(now - 20)-0"))
        // A stream that is gone: one that expired took only entries older than the retention, so an
        // entry's id within it means Redis lost the stream, and what followed it. The end given for
        // an empty stream missed nothing.
        let gone = LiveStream.Backlog(serverTime: now, last: nil, entries: [], matching: [])
        #expect(gone.resumption(after: StreamID("\(now - day + 1_000)-0")!) == .reset)
        #expect(gone.resumption(after: StreamID.justBefore(milliseconds: now - 60_000)) == .replay([]))
        #expect(gone.resumption(after: StreamID("\(now - day - 1_000)-0")!) == .reset)
        #expect(gone.resumption(after: StreamID.justBefore(milliseconds: now - day - 1_000)) == .reset)
        #expect(gone.resumption(after: StreamID("\(now + 60_000)-0")!) == .reset)
        #expect(gone.end == StreamID(milliseconds: now - 1, sequence: .max))
        // The first entry of a stream begun afresh names the horizon: an id older than that resets;
        // so does an entry's id after it (the old stream was lost), but not the end of an empty one.
        let fresh = LiveStream.Backlog(
            serverTime: now, last: StreamID("\(now)-0"), entries: [Self.entry("\(now)-0", after: "\(now - day)-18446744073709551615")], matching: [])
        #expect(fresh.resumption(after: StreamID("\(now - day - 1)-0")!) == .reset)
        #expect(fresh.resumption(after: StreamID("\(now - 5_000)-0")!) == .reset)
        #expect(fresh.resumption(after: StreamID.justBefore(milliseconds: now - 5_000)) == .replay(fresh.entries))
        // A stream begun before the horizon was marked so: its first entry is taken as before.
        let older = LiveStream.Backlog(
            serverTime: now, last: StreamID("\(now)-0"), entries: [Self.entry("\(now)-0", after: "\(now - day)-0")], matching: [])
        #expect(older.resumption(after: StreamID("\(now - 5_000)-0")!) == .replay(older.entries))
    }

    /// The script the relay runs: one entry in the user's stream, naming the one before, and the same
    /// id with the envelope on the user's channel.
    @Test func publishingAddsToTheUsersStreamAndChannel() async throws {
        let config = try TestEnvironment.redis()
        let redis = RedisClient(configuration: config, logger: TestEnvironment.logger)
        let subscriber = RedisSubscriber(configuration: config, logger: TestEnvironment.logger)
        let running = Task { try await subscriber.run() }
        defer { running.cancel(); Task { await redis.close() } }
        let user = UUID()
        let key = LiveStream.key(for: user)
        // An entry from long ago, as a stream left from an earlier day would hold.
        try await redis.send("XADD", RedisArgument(key), "1000-0", "type", "old", "envelope", "{}")
        // A pattern of this test's own (other tests' gateways subscribe to `user:*`), for the probe
        // to tell when it is live.
        let messages = subscriber.psubscribe(LiveStream.channel(for: user) + "*")
        try await waitUntil { try await redis.publish(LiveStream.channel(for: user) + ":probe", "probe") > 0 }

        let envelopes = try (0..<3).map { _ in try EventEnvelope(UserDeleted(userID: user), producer: "test", userID: user).json }
        var ids: [StreamID] = []
        for envelope in envelopes { ids.append(try await LiveStream.publish(envelope: envelope, type: UserDeleted.eventType, to: user, redis: redis)) }

        var received: [LiveStream.Message] = []
        for await message in messages where message.channel == LiveStream.channel(for: user) {
            received.append(try #require(LiveStream.Message(payload: message.payload)))
            if received.count == 3 { break }
        }
        #expect(received.map(\.id) == ids && received.map(\.envelope) == envelopes)
        #expect(LiveStream.user(ofChannel: LiveStream.channel(for: user)) == user)

        // The old entry is gone (older than a day); each entry names the one before it.
        let backlog = try await LiveStream.read(for: user, after: StreamID("0-1"), redis: redis)
        #expect(backlog.entries.map(\.id) == ids && backlog.last == ids.last)
        #expect(backlog.entries.dropFirst().map(\.previous) == ids.dropLast().map { Optional($0) })
        #expect(backlog.entries.first?.previous == StreamID("1000-0"))
        #expect(backlog.entries.allSatisfy { $0.type == UserDeleted.eventType })
        #expect(backlog.serverTime > ids.last!.milliseconds - 1_000)
        let ttl = try #require(try await redis.pttl(key))
        #expect(ttl > 86_000_000 && ttl <= 86_400_000)

        // Read after an id, and by type anywhere.
        let later = try await LiveStream.read(for: user, after: ids[0], matching: [UserDeleted.eventType, "other"], redis: redis)
        #expect(later.entries.map(\.id) == Array(ids.dropFirst()) && later.matching.map(\.id) == ids)
        #expect(later.resumption(after: ids[0]) == .replay(later.entries))

        // A stream begun afresh: its first entry names the horizon a day back.
        let newcomer = UUID()
        let first = try await LiveStream.publish(envelope: envelopes[0], type: UserDeleted.eventType, to: newcomer, redis: redis)
        let fresh = try await LiveStream.read(for: newcomer, after: StreamID("0-1"), redis: redis)
        let horizon = try #require(fresh.entries.first?.previous)
        #expect(horizon.sequence == .max && first.milliseconds - horizon.milliseconds >= 86_399_000 && first.milliseconds - horizon.milliseconds <= 86_401_000)
        #expect(try await LiveStream.read(for: UUID(), after: nil, redis: redis).last == nil)
    }

    @Test func theRequestLineNeverHoldsATicket() {
        #expect(RequestLog.redacted("/v1/events?ticket=abc123&last_event_id=1-0") == "/v1/events?ticket=[redacted]&last_event_id=1-0")
        #expect(RequestLog.redacted("/v1/events?last_event_id=1-0&ticket=abc") == "/v1/events?last_event_id=1-0&ticket=[redacted]")
        #expect(RequestLog.redacted("/v1/events?tickets=1") == "/v1/events?tickets=1")
        #expect(RequestLog.redacted("/v1/events") == "/v1/events")
        #expect(RequestLog.redacted("/v1/invitations/SECRET?ticket=x") == "/v1/invitations/[redacted]?ticket=[redacted]")
    }
}
