import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceKitCore
import ServiceLifecycle
import Synchronization

/// A message received on a subscribed channel.
public struct RedisMessage: Sendable, Equatable {
    public var channel: String
    public var payload: [UInt8]
    public var text: String { String(decoding: payload, as: UTF8.self) }
}

/// The dedicated pub/sub connection. It keeps the set of subscribed channels and patterns and,
/// whenever the connection is lost, reconnects with backoff and subscribes to all of them again, so subscribers
/// only see a gap, never a dead stream. Run it as a `Service`.
///
/// A subscriber only reads, so a server that vanished without closing the connection (its host
/// down, a partition, a failover that moved the primary) would leave it waiting on a connection
/// nothing comes down, for the kernel's keepalive hours. So it sends `PING` every `pingInterval`
/// and, when no `pong` came back within that and the command timeout, closes the connection and
/// reconnects: its listeners then hear of the gap (`onSubscribed`).
public final class RedisSubscriber: Service, Sendable {
    private struct Listener: Sendable {
        var id: Int
        var continuation: AsyncStream<RedisMessage>.Continuation
        /// Called each time Redis confirms the subscription (pattern listeners; see `psubscribe`).
        var onSubscribed: (@Sendable () -> Void)?
        /// Called at each answer to a `PING` on a connection that holds the subscription, with when
        /// the `PING` was sent.
        var onAlive: (@Sendable (Date) -> Void)?
    }

    private struct State {
        var listeners: [String: [Listener]] = [:]
        /// Pattern subscriptions (`PSUBSCRIBE`), by pattern.
        var patternListeners: [String: [Listener]] = [:]
        var connection: RedisConnection?
        /// Counts connections, so that what an earlier one delivers late is told apart.
        var generation = 0
        /// Patterns Redis confirmed on the current connection.
        var confirmedPatterns: Set<String> = []
        /// `PSUBSCRIBE`s written on the current connection and not yet confirmed, by pattern. A
        /// pattern is confirmed by the answer to the last one only: after its listeners left and
        /// others came, the answer to the first is followed by the `PUNSUBSCRIBE`'s.
        var unansweredPatternSubscriptions: [String: Int] = [:]
        var nextID = 0
        /// When the server last answered a `PING` (or the connection was made).
        var lastPong = ContinuousClock.now
        /// When each `PING` not yet answered on the current connection was sent, oldest first, and the
        /// last listener id given out by then: a listener that joined later hears nothing of its answer.
        var pingsSent: [(at: Date, lastListener: Int)] = []
    }

    private let configuration: RedisConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex(State())
    /// How often the connection is checked with `PING`.
    let pingInterval: Duration

    public init(
        configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger,
        pingInterval: Duration = .seconds(5)
    ) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        self.pingInterval = pingInterval
    }

    /// Messages on `channel` from now on, until the stream is dropped.
    package func subscribe(_ channel: String, bufferingNewest limit: Int = 1_000) -> AsyncStream<RedisMessage> {
        let (stream, continuation) = AsyncStream.makeStream(of: RedisMessage.self, bufferingPolicy: .bufferingNewest(limit))
        // Writing under the lock keeps SUBSCRIBE and UNSUBSCRIBE of one channel in call order.
        let id = state.withLock { state in
            state.nextID += 1
            if state.listeners[channel, default: []].isEmpty {
                state.connection?.write(["SUBSCRIBE", RedisArgument(channel)])
            }
            state.listeners[channel, default: []].append(Listener(id: state.nextID, continuation: continuation))
            return state.nextID
        }
        continuation.onTermination = { [weak self] _ in self?.remove(channel: channel, id: id) }
        return stream
    }

    /// Messages on every channel matching `pattern` (`PSUBSCRIBE`, `user:*`) from now on, until the
    /// stream is dropped. `onSubscribed` runs each time Redis confirms the pattern's subscription (when
    /// its first listener asks, and after every reconnection), before any message of that subscription
    /// is yielded: what was published while the connection was down is lost to pub/sub, and a listener
    /// that keeps a durable copy elsewhere reads it again from there. `onAlive` runs at each answer to
    /// the subscriber's `PING` on a connection where the subscription was confirmed, with when the
    /// `PING` was sent: Redis answers in order, so everything published before then has been
    /// delivered, and a read after a gap may start there. Not behind Sentinel: a primary cut off from
    /// the others goes on answering while messages go to the new one. A listener that joins a pattern
    /// Redis has already confirmed hears `onSubscribed` before this returns, under the subscriber's
    /// lock (so before any `onAlive`): it must not call back into the subscriber.
    public func psubscribe(
        _ pattern: String, bufferingNewest limit: Int = 10_000, onSubscribed: (@Sendable () -> Void)? = nil, onAlive: (@Sendable (Date) -> Void)? = nil
    ) -> AsyncStream<RedisMessage> {
        let (stream, continuation) = AsyncStream.makeStream(of: RedisMessage.self, bufferingPolicy: .bufferingNewest(limit))
        let id = state.withLock { state in
            state.nextID += 1
            if state.patternListeners[pattern, default: []].isEmpty, let connection = state.connection {
                connection.write(["PSUBSCRIBE", RedisArgument(pattern)])
                state.unansweredPatternSubscriptions[pattern, default: 0] += 1
            }
            state.patternListeners[pattern, default: []].append(
                Listener(id: state.nextID, continuation: continuation, onSubscribed: onSubscribed, onAlive: onAlive))
            if state.confirmedPatterns.contains(pattern) { onSubscribed?() }
            return state.nextID
        }
        continuation.onTermination = { [weak self] _ in self?.remove(pattern: pattern, id: id) }
        return stream
    }

    /// Number of channels with at least one listener.
    package var channelCount: Int { state.withLock { $0.listeners.count } }

    /// Number of patterns with at least one listener.
    package var patternCount: Int { state.withLock { $0.patternListeners.count } }

    private func remove(pattern: String, id: Int) {
        state.withLock { state in
            state.patternListeners[pattern]?.removeAll { $0.id == id }
            if state.patternListeners[pattern]?.isEmpty ?? false {
                state.patternListeners[pattern] = nil
                state.confirmedPatterns.remove(pattern)
                state.connection?.write(["PUNSUBSCRIBE", RedisArgument(pattern)])
            }
        }
    }

    private func remove(channel: String, id: Int) {
        state.withLock { state in
            state.listeners[channel]?.removeAll { $0.id == id }
            if state.listeners[channel]?.isEmpty ?? false {
                state.listeners[channel] = nil
                state.connection?.write(["UNSUBSCRIBE", RedisArgument(channel)])
            }
        }
    }

    /// Everything a subscriber connection receives: `message` (channel, payload), `pmessage`
    /// (pattern, channel, payload), the confirmations of `subscribe` and `psubscribe`, and the answers
    /// to `PING`, from the connection `generation` counts.
    private func push(_ value: RESPValue, generation: Int) {
        // `PING` on a connection that holds no subscription (every listener gone) is answered `+PONG`.
        if case .simpleString("PONG") = value {
            answered(generation: generation, subscribed: false)
            return
        }
        // An error confirms nothing: a `PSUBSCRIBE` an ACL refuses leaves its pattern unconfirmed until
        // the next connection, which only the log tells.
        if case .error(let message) = value {
            logger.error("redis answered the subscriber with an error", metadata: ["error": "\(message)"])
            return
        }
        guard let parts = value.array, let kind = parts.first?.string else { return }
        switch kind {
        case "message":
            guard parts.count == 3, let channel = parts[1].string, case .bulkString(let payload) = parts[2] else { return }
            let listeners = state.withLock { $0.listeners[channel] ?? [] }
            for listener in listeners {
                listener.continuation.yield(RedisMessage(channel: channel, payload: payload))
            }
        case "pmessage":
            guard parts.count == 4, let pattern = parts[1].string, let channel = parts[2].string, case .bulkString(let payload) = parts[3] else { return }
            let listeners = state.withLock { $0.patternListeners[pattern] ?? [] }
            for listener in listeners {
                listener.continuation.yield(RedisMessage(channel: channel, payload: payload))
            }
        case "pong":
            answered(generation: generation, subscribed: true)
        case "subscribe", "psubscribe":
            guard parts.count == 3, let name = parts[1].string else { return }
            let listeners = state.withLock { state -> [Listener] in
                guard state.generation == generation else { return [] }
                guard kind == "psubscribe" else { return state.listeners[name] ?? [] }
                let unanswered = (state.unansweredPatternSubscriptions[name] ?? 1) - 1
                state.unansweredPatternSubscriptions[name] = unanswered > 0 ? unanswered : nil
                guard unanswered <= 0, let listeners = state.patternListeners[name] else { return [] }
                state.confirmedPatterns.insert(name)
                return listeners
            }
            for listener in listeners { listener.onSubscribed?() }
        default:
            return
        }
    }

    /// A `PING` was answered on the connection `generation` counts: in the subscribed form, or as
    /// `+PONG`, which Redis sends only to a connection that holds no subscription at all.
    private func answered(generation: Int, subscribed: Bool) {
        let trustsAnswers = subscribed && configuration.sentinels.isEmpty
        let (alive, sentAt) = state.withLock { state -> ([Listener], Date?) in
            state.lastPong = .now
            guard state.generation == generation, !state.pingsSent.isEmpty else { return ([], nil) }
            let ping = state.pingsSent.removeFirst()
            guard trustsAnswers else { return ([], nil) }
            let listeners = state.confirmedPatterns.flatMap { state.patternListeners[$0] ?? [] }.filter { $0.id <= ping.lastListener }
            return (listeners, ping.at)
        }
        guard let sentAt else { return }
        for listener in alive { listener.onAlive?(sentAt) }
    }

    public func run() async throws {
        var failures = 0
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            do {
                let generation = state.withLock { state in
                    state.generation += 1
                    state.confirmedPatterns = []
                    state.unansweredPatternSubscriptions = [:]
                    state.pingsSent = []
                    return state.generation
                }
                let connection = try await RedisConnection.connect(configuration, eventLoopGroup: eventLoopGroup) { [weak self] value in
                    self?.push(value, generation: generation)
                }
                let channels = state.withLock { state in
                    state.connection = connection
                    state.lastPong = .now
                    for channel in state.listeners.keys { connection.write(["SUBSCRIBE", RedisArgument(channel)]) }
                    for pattern in state.patternListeners.keys {
                        connection.write(["PSUBSCRIBE", RedisArgument(pattern)])
                        state.unansweredPatternSubscriptions[pattern] = 1
                    }
                    return state.listeners.count + state.patternListeners.count
                }
                if failures > 0 { logger.info("redis subscriber reconnected", metadata: ["channels": "\(channels)"]) }
                let connectedAt = ContinuousClock.now
                try await cancelWhenGracefulShutdown {
                    try await withTaskCancellationHandler {
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask { try await connection.channel.closeFuture.get() }
                            group.addTask { try await self.checkAlive(connection) }
                            _ = try await group.next()
                            group.cancelAll()
                        }
                    } onCancel: {
                        connection.close()
                    }
                }
                state.withLock { state in
                    state.connection = nil
                    state.confirmedPatterns = []
                }
                if Task.isShuttingDownGracefully || Task.isCancelled { break }
                // Only a connection that lived a while resets the backoff: a server that accepts and
                // closes at once must not cause a hot reconnect loop.
                if ContinuousClock.now - connectedAt > .seconds(5) { failures = 0 }
                failures += 1
                logger.warning("redis subscriber connection lost; reconnecting")
                await Self.pause(for: min(configuration.backoffBase * (1 << min(failures - 1, 16)), configuration.backoffMax))
            } catch {
                state.withLock { $0.connection = nil }
                if Task.isShuttingDownGracefully || Task.isCancelled { break }
                failures += 1
                let wait = min(configuration.backoffBase * (1 << min(failures - 1, 16)), configuration.backoffMax)
                logger.warning("redis subscriber cannot connect", metadata: ["error": "\(error)", "retry_in": "\(wait)"])
                await Self.pause(for: wait)
            }
        }
        let listeners = state.withLock { state in
            defer {
                state.listeners = [:]
                state.patternListeners = [:]
            }
            return state.listeners.values.flatMap { $0 } + state.patternListeners.values.flatMap { $0 }
        }
        for listener in listeners { listener.continuation.finish() }
    }

    /// Pings the connection every `pingInterval` and closes it once the server has not answered
    /// for that and the command timeout: the reconnection that follows subscribes anew.
    private func checkAlive(_ connection: RedisConnection) async throws {
        while true {
            try await Task.sleep(for: pingInterval)
            let silent = ContinuousClock.now - state.withLock { $0.lastPong }
            if silent > pingInterval + .nanoseconds(configuration.commandTimeout.nanoseconds) {
                logger.warning("redis subscriber connection silent; reconnecting", metadata: ["silent": "\(silent)"])
                connection.close()
                return
            }
            // Noted before it is written, so that its answer finds it.
            state.withLock { $0.pingsSent.append((Date(), $0.nextID)) }
            connection.write(["PING"])
        }
    }

    /// A backoff that a graceful shutdown cuts short: a process whose Redis is away stops at once.
    private static func pause(for duration: Duration) async {
        try? await cancelWhenGracefulShutdown { try await Task.sleep(for: duration) }
    }
}
