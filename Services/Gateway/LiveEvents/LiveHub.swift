import Foundation
import Logging
import NIOCore
import ServiceKit
import ServiceLifecycle
import Synchronization

/// This process's open event streams, by user, and the one Redis subscription that feeds them
/// (`PSUBSCRIBE user:*`): each message goes to the streams of the user its channel names, and to no
/// other. One subscription per process, not one per stream: Redis keeps one connection for the
/// gateway whatever the number of clients.
final class LiveHub: Service, Sendable {
    /// What a stream is told, in order.
    enum Signal: Sendable {
        /// A live entry for the client, as its frame.
        case event(StreamID, ByteBuffer)
        /// The subscription (re)started: messages published before it may have been missed, and the
        /// stream reads them from the user's live stream.
        case resync
        /// Time for a heartbeat.
        case heartbeat
        /// The user's newer streams here took this one's place (`makeRoom`): it ends.
        case replaced
    }

    /// A stream's place in the hub.
    struct Registration: Sendable {
        let user: UUID
        let id: Int
        let signals: AsyncStream<Signal>
        let continuation: AsyncStream<Signal>.Continuation
    }

    private struct Listener: Sendable {
        var session: UUID?
        var continuation: AsyncStream<Signal>.Continuation
        /// Its session checked and its slot taken (`makeRoom`): only such streams count against the
        /// user's limit, so a stream still being checked (perhaps of an ended session) ends no other.
        var claimed = false
    }

    /// Signals a stream may have waiting (a slow client's); past it the stream ends and its client
    /// resumes from the live stream, so nothing is lost by it.
    static let bufferLimit = 1_000

    private let subscriber: RedisSubscriber
    private let logger: Logger
    /// What ended, for the proxy to refuse the tokens of (`EndedSessions`).
    let ended: EndedSessions
    /// Reads the endings the subscription may have missed from the event stream, each time it starts.
    private let catchUp: EndingsCatchUp?
    /// When the subscription was last known to be up (it started, or Redis answered a `PING` the
    /// subscriber sent then on it), in this process's milliseconds since 1970; 0 before it first
    /// started.
    private let aliveAt = Atomic<Int64>(0)
    private let listeners = Mutex<[UUID: [Int: Listener]]>([:])
    private let nextID = Atomic<Int>(0)
    private let openStreams = Atomic<Int>(0)

    init(subscriber: RedisSubscriber, ended: EndedSessions = EndedSessions(), catchUp: EndingsCatchUp? = nil, logger: Logger) {
        self.subscriber = subscriber
        self.ended = ended
        self.catchUp = catchUp
        self.logger = logger
    }

    /// Streams open in this process.
    var streamCount: Int { openStreams.load(ordering: .relaxed) }

    /// Counts a new stream in, unless `limit` are open.
    func reserve(limit: Int) -> Bool {
        var current = openStreams.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = openStreams.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func unreserve() {
        openStreams.subtract(1, ordering: .relaxed)
    }

    /// Starts taking `user`'s messages for a stream opened with `session`'s token. Messages wait in
    /// the registration until the stream reads them.
    func register(user: UUID, session: UUID?) -> Registration {
        let (signals, continuation) = AsyncStream.makeStream(of: Signal.self, bufferingPolicy: .bufferingOldest(Self.bufferLimit))
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        listeners.withLock { $0[user, default: [:]][id] = Listener(session: session, continuation: continuation) }
        return Registration(user: user, id: id, signals: signals, continuation: continuation)
    }

    /// Holds the user's streams in this process to `limit`, `registration`'s among them (its session
    /// checked, its slot taken): the oldest others are told they were replaced, and hear nothing more. The user's count across processes
    /// (`StreamSlots`) ends a stream only at its next heartbeat, by which time a client opening
    /// streams as fast as the rate limit lets it would hold hundreds; here it holds `limit` at most.
    func makeRoom(for registration: Registration, limit: Int) {
        let replaced = listeners.withLock { listeners -> [Listener] in
            guard var mine = listeners[registration.user], mine[registration.id] != nil else { return [] }
            mine[registration.id]?.claimed = true
            let claimed = mine.filter(\.value.claimed).keys
            guard claimed.count > limit else {
                listeners[registration.user] = mine
                return []
            }
            let oldest = claimed.filter { $0 != registration.id }.sorted().prefix(claimed.count - limit)
            let replaced = oldest.compactMap { mine.removeValue(forKey: $0) }
            listeners[registration.user] = mine
            return replaced
        }
        for listener in replaced {
            if case .dropped = listener.continuation.yield(.replaced) { listener.continuation.finish() }
        }
    }

    func unregister(_ registration: Registration) {
        listeners.withLock { listeners in
            listeners[registration.user]?[registration.id] = nil
            if listeners[registration.user]?.isEmpty == true { listeners[registration.user] = nil }
        }
        registration.continuation.finish()
    }

    func run() async throws {
        let messages = subscriber.psubscribe(
            LiveStream.channelPattern, bufferingNewest: 100_000, onSubscribed: { [weak self] in self?.subscribed() }, onAlive: { [weak self] sentAt in self?.alive(at: sentAt) })
        // Stopped, and waited for, before the service closes the Redis connections it reads on.
        let catchingUp = catchUp.map { catchUp in Task { await catchUp.run() } }
        do {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { try await self.subscriber.run() }
                // Ends when the subscriber stops (graceful shutdown).
                for await message in messages { dispatch(message) }
            }
        } catch {
            catchingUp?.cancel()
            await catchingUp?.value
            throw error
        }
        catchingUp?.cancel()
        await catchingUp?.value
        // Streams end with the process: their clients reconnect to another one.
        let all = listeners.withLock { listeners in
            defer { listeners = [:] }
            return listeners.values.flatMap { $0.values }
        }
        for listener in all { listener.continuation.finish() }
    }

    /// Sends a message to the streams of the user its channel names; what it ends (a session, an
    /// account) is recorded whether or not the user has a stream here.
    func dispatch(_ message: RedisMessage) {
        guard let user = LiveStream.user(ofChannel: message.channel) else { return }
        let targets = listeners.withLock { $0[user] ?? [:] }
        if Self.mayEnd(message.payload), let live = LiveStream.Message(payload: message.payload), let type = Self.type(of: live.envelope),
            let ending = LiveEnding(type: type, envelope: live.envelope, of: user)
        {
            ended.record(ending, of: user)
            for (_, listener) in targets where ending.ends(session: listener.session) { listener.continuation.finish() }
            return
        }
        // Most messages are for users with no stream here: nothing is parsed for them.
        guard !targets.isEmpty, let live = LiveStream.Message(payload: message.payload), let type = Self.type(of: live.envelope) else { return }
        guard let frame = SSEFrame.of(id: live.id, type: type, envelope: live.envelope) else { return }
        for (_, listener) in targets {
            if case .dropped = listener.continuation.yield(.event(live.id, frame)) {
                logger.notice("live stream too far behind; closed for its client to resume", metadata: ["user_id": "\(user)"])
                listener.continuation.finish()
            }
        }
    }

    /// How much earlier than it would otherwise a read of missed endings starts: the stream's ids
    /// are Redis's clock, not this process's, and a token is taken a little past its expiry
    /// (`JWT_LEEWAY_MS`).
    static let catchUpMargin: TimeInterval = 60

    /// Redis answered a `PING` sent at `sentAt` on the subscription: everything published before
    /// then has come. So a quiet hour does not leave a reconnection reading a whole generation back.
    private func alive(at sentAt: Date) {
        if catchUp != nil { aliveAt.store(Self.milliseconds(sentAt), ordering: .relaxed) }
    }

    /// The subscription (re)started: what was published while it was down is read again, by every
    /// stream from its user's live stream, and for the endings from the event stream.
    private func subscribed() {
        let now = Date()
        let horizon = Self.horizon(now: now)
        let lastAlive = aliveAt.exchange(Self.milliseconds(now), ordering: .relaxed)
        catchUp?.request(since: lastAlive == 0 ? horizon : max(horizon, Date(timeIntervalSince1970: Double(lastAlive) / 1000) - Self.catchUpMargin))
        resyncAll()
    }

    /// How far back a gateway that has heard nothing reads: any token of a session that ended
    /// earlier has expired.
    static func horizon(now: Date) -> Date {
        now - Double(EndedSessions.generation.components.seconds) - catchUpMargin
    }

    /// Has the endings of `horizon` on read before the port opens (`EndingsCatchUp.readBeforeServing`).
    func readEndingsBeforeServing(within: Duration) async {
        guard let catchUp, !(await catchUp.readBeforeServing(since: Self.horizon(now: Date()), within: within)) else { return }
        logger.warning("opening the port before the event stream's endings were read", metadata: ["waited": "\(within)"])
    }

    private static func milliseconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970 * 1000) }

    /// Every stream reads what it may have missed while the subscription was down.
    private func resyncAll() {
        let all = listeners.withLock { $0.values.flatMap { $0.values } }
        for listener in all {
            if case .dropped = listener.continuation.yield(.resync) { listener.continuation.finish() }
        }
    }

    /// Whether a message may announce an ending: its envelope names one of `LiveEventNames.ending`
    /// verbatim (a type is written as it is, nothing in it escaped), so any other message is passed
    /// over without parsing it.
    static func mayEnd(_ payload: [UInt8]) -> Bool {
        endingTypes.contains { payload.firstRange(of: $0) != nil }
    }

    private static let endingTypes = LiveEventNames.ending.map { Array($0.utf8) }

    static func type(of envelope: String) -> String? {
        (try? EventEnvelope(json: envelope))?.type
    }
}
