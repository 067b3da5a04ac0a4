import Foundation
import Logging
import ServiceKit
import Synchronization

/// Reads from the event stream (`EVENTS_STREAM`) the endings the live subscription may have missed,
/// so that `EndedSessions` holds them too: pub/sub keeps nothing for a subscriber that is away, and
/// the stream keeps the events (up to `EVENTS_MAXLEN`), its ids the times Redis took them. `LiveHub`
/// asks for a read each time its subscription starts: from a little over `EndedSessions.generation`
/// ago when the process starts (a gateway started or restarted by a deploy has heard nothing; its
/// public port opens once that first read has been tried, `readBeforeServing`), and after a
/// reconnection from a little before the subscription was last known to be up. A read goes through
/// the stream from that time in pages and records what each `user.sessions_ended` and `user.deleted`
/// entry ends; requests that come while one is read are served together after it, from the earliest
/// time asked for; a read Redis refuses is tried again.
final class EndingsCatchUp: Sendable {
    /// Entries a page.
    static let page = 500

    private let redis: RedisClient
    private let stream: String
    private let ended: EndedSessions
    private let logger: Logger
    /// The earliest time asked for and not yet read from.
    private let pending = Mutex<Date?>(nil)
    private let bell: AsyncStream<Void>
    private let ring: AsyncStream<Void>.Continuation
    /// Whether a read has been tried yet, and who waits for the first try.
    private let firstTry = Mutex<FirstTry>(FirstTry())

    private struct FirstTry {
        var done = false
        var waiters: [UUID: CheckedContinuation<Void, Never>] = [:]
    }

    init(redis: RedisClient, stream: String, ended: EndedSessions, logger: Logger) {
        self.redis = redis
        self.stream = stream
        self.ended = ended
        self.logger = logger
        (bell, ring) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Asks for what the stream took from `since` on to be read: at once, or after the read in hand.
    func request(since: Date) {
        pending.withLock { $0 = min($0 ?? since, since) }
        ring.yield()
    }

    /// Asks for a read from `since` and waits, at most `within`, until the first read has been tried
    /// (read, or refused by Redis): the gateway opens its port then, so that a token of a session
    /// that ended while no gateway was up is marked from its first request. Redis refusing or slow
    /// to answer does not keep the port closed past that; the read is tried again as any is.
    /// Returns whether it was tried in time.
    func readBeforeServing(since: Date, within: Duration) async -> Bool {
        request(since: since)
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await self.firstTried()
                return true
            }
            group.addTask {
                try? await Task.sleep(for: within)
                return false
            }
            let tried = await group.next() ?? false
            group.cancelAll()
            return tried
        }
    }

    /// Returns once the first read has been tried, or the task is cancelled.
    private func firstTried() async {
        let waiter = UUID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waits = firstTry.withLock { state in
                    guard !state.done, !Task.isCancelled else { return false }
                    state.waiters[waiter] = continuation
                    return true
                }
                if !waits { continuation.resume() }
            }
        } onCancel: {
            firstTry.withLock { $0.waiters.removeValue(forKey: waiter) }?.resume()
        }
    }

    private func tried() {
        let waiters = firstTry.withLock { state in
            state.done = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Serves the requests until the task is cancelled.
    func run() async {
        var failures = 0
        for await _ in bell {
            guard let since = takePending() else { continue }
            do {
                let read = try await read(since: since)
                tried()
                if failures > 0 || read.endings > 0 {
                    logger.info("read the endings the live subscription may have missed", metadata: ["since": "\(since)", "endings": "\(read.endings)"])
                }
                if let kept = read.keptFrom {
                    logger.warning(
                        "the event stream no longer holds all the endings the live subscription may have missed; raise EVENTS_MAXLEN",
                        metadata: ["since": "\(since)", "kept_from": "\(kept)"])
                }
                failures = 0
            } catch {
                if Task.isCancelled { return }
                tried()
                failures += 1
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("could not read the event stream for missed endings; trying again", metadata: ["error": "\(error)", "failures": "\(failures)"])
                }
                request(since: since)
                do { try await Task.sleep(for: min(.milliseconds(250) * (1 << min(failures - 1, 7)), .seconds(30))) } catch { return }
            }
        }
    }

    private func takePending() -> Date? {
        pending.withLock { pending in
            defer { pending = nil }
            return pending
        }
    }

    /// What a read found.
    struct Read: Equatable {
        /// The endings recorded.
        var endings: Int
        /// The stream's first entry, when it has dropped older ones (`EVENTS_MAXLEN`, the retention)
        /// and lies after the read's start: the stream cannot tell what ended between the two.
        var keptFrom: StreamID?
    }

    /// Records the endings among the stream's entries from `since` on. An entry's own user is the
    /// one whose sessions it ends, as on the live subscription.
    func read(since: Date) async throws -> Read {
        let milliseconds = UInt64(max(0, (since.timeIntervalSince1970 * 1000).rounded(.down)))
        let first = StreamID(milliseconds: milliseconds, sequence: 0)
        var start = first.description
        var recorded = 0
        while true {
            try Task.checkCancellation()
            let entries = try await redis.xrange(stream, from: start, count: Self.page)
            for entry in entries {
                guard let type = entry.fields["type"], LiveEventNames.ending.contains(type), let json = entry.fields["envelope"],
                    let user = (try? EventEnvelope(json: json))?.userID, let ending = LiveEnding(type: type, envelope: json, of: user)
                else { continue }
                ended.record(ending, of: user)
                recorded += 1
            }
            guard entries.count == Self.page, let last = entries.last else { break }
            start = "(" + last.id
        }
        return Read(endings: recorded, keptFrom: try await keptFrom(after: first))
    }

    /// The stream's first entry if the stream has dropped entries and it lies after `first`. Asked
    /// after the read, so that a trim while it ran counts too. Redis tells it from 7.0 on
    /// (`entries-added` against `length`, `recorded-first-entry-id`); a stream not made yet is an
    /// error reply, and has dropped nothing.
    private func keptFrom(after first: StreamID) async throws -> StreamID? {
        let info = try await redis.pipeline([["XINFO", "STREAM", RedisArgument(stream)]]).first?.fields ?? [:]
        guard let added = info["entries-added"]?.int, let length = info["length"]?.int, added > length,
            let text = info["recorded-first-entry-id"]?.string, let kept = StreamID(text), kept > first
        else { return nil }
        return kept
    }
}
