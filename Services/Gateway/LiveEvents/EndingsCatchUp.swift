import Foundation
import Logging
import ServiceKit
import Synchronization

/// Reads from the event stream (`EVENTS_STREAM`) the endings the live subscription may have missed,
/// so that `EndedSessions` holds them too: pub/sub keeps nothing for a subscriber that is away, and
/// the stream keeps the events (up to `EVENTS_MAXLEN`), its ids the times Redis took them. `LiveHub`
/// asks for a read each time its subscription starts: from a little over `EndedSessions.generation`
/// ago when the process starts (a gateway started or restarted by a deploy has heard nothing), and
/// after a reconnection from a little before the subscription was last known to be up. A read goes through the stream from that
/// time in pages and records what each `user.sessions_ended` and `user.deleted` entry ends; requests
/// that come while one is read are served together after it, from the earliest time asked for; a
/// read Redis refuses is tried again.
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

    /// Serves the requests until the task is cancelled.
    func run() async {
        var failures = 0
        for await _ in bell {
            guard let since = takePending() else { continue }
            do {
                let recorded = try await read(since: since)
                if failures > 0 || recorded > 0 {
                    logger.info("read the endings the live subscription may have missed", metadata: ["since": "\(since)", "endings": "\(recorded)"])
                }
                failures = 0
            } catch {
                if Task.isCancelled { return }
                failures += 1
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("could not read the event stream for missed endings; trying again", metadata: ["error": "\(error)", "failures": "\(failures)"])
                }
                request(since: since)
                do { try await Task.sleep(for: min(.milliseconds(250) * (1 << min(failures - 1, 7)), .seconds(30))) } catch { return }
            }
        }
    }

    /// One read from `since`, before the gateway opens its port, given at most `within`: a token of
    /// a session that ended while no gateway was up is then marked from the first request. The port
    /// opens all the same when Redis refuses the read or is slow to answer it: the subscription's own
    /// reads, tried until Redis answers, record the endings then.
    func readBeforeServing(since: Date, within: Duration) async {
        // Whichever ends first, the read or the wait, answers; a read still going on when the wait
        // ends goes on, and records what it finds then.
        let outcome: String? = await withCheckedContinuation { continuation in
            let answer = OneAnswer(continuation)
            let waiting = Task {
                try? await Task.sleep(for: within)
                answer.give("no answer within \(within)")
            }
            Task {
                do {
                    _ = try await self.read(since: since)
                    answer.give(nil)
                } catch {
                    answer.give("\(error)")
                }
                waiting.cancel()
            }
        }
        if let outcome {
            logger.warning("opening the port before the event stream's endings were read", metadata: ["error": "\(outcome)"])
        }
    }

    private func takePending() -> Date? {
        pending.withLock { pending in
            defer { pending = nil }
            return pending
        }
    }

    /// Records the endings among the stream's entries from `since` on; returns how many it read.
    /// An entry's own user is the one whose sessions it ends, as on the live subscription.
    func read(since: Date) async throws -> Int {
        let milliseconds = UInt64(max(0, (since.timeIntervalSince1970 * 1000).rounded(.down)))
        var start = StreamID(milliseconds: milliseconds, sequence: 0).description
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
            guard entries.count == Self.page, let last = entries.last else { return recorded }
            start = "(" + last.id
        }
    }
}

/// A continuation resumed by the first of several that may answer it.
private final class OneAnswer: Sendable {
    private let continuation: Mutex<CheckedContinuation<String?, Never>?>

    init(_ continuation: CheckedContinuation<String?, Never>) {
        self.continuation = Mutex(continuation)
    }

    func give(_ answer: String?) {
        continuation.withLock { $0.take() }?.resume(returning: answer)
    }
}
