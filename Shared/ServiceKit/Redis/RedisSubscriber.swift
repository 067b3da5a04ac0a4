import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// A message received on a subscribed channel.
public struct RedisMessage: Sendable, Equatable {
    public var channel: String
    public var payload: [UInt8]
    public var text: String { String(decoding: payload, as: UTF8.self) }
}

/// The dedicated pub/sub connection. It keeps the set of subscribed channels and, whenever the
/// connection is lost, reconnects with backoff and subscribes to all of them again, so subscribers
/// only see a gap, never a dead stream. Run it as a `Service`.
public final class RedisSubscriber: Service, Sendable {
    private struct Listener: Sendable {
        var id: Int
        var continuation: AsyncStream<RedisMessage>.Continuation
    }

    private struct State {
        var listeners: [String: [Listener]] = [:]
        var connection: RedisConnection?
        var nextID = 0
    }

    private let configuration: RedisConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex(State())

    public init(configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
    }

    /// Messages on `channel` from now on, until the stream is dropped.
    public func subscribe(_ channel: String, bufferingNewest limit: Int = 1_000) -> AsyncStream<RedisMessage> {
        let (stream, continuation) = AsyncStream.makeStream(of: RedisMessage.self, bufferingPolicy: .bufferingNewest(limit))
        let (id, connection, isFirst) = state.withLock { state in
            state.nextID += 1
            let isFirst = state.listeners[channel, default: []].isEmpty
            state.listeners[channel, default: []].append(Listener(id: state.nextID, continuation: continuation))
            return (state.nextID, state.connection, isFirst)
        }
        continuation.onTermination = { [weak self] _ in self?.remove(channel: channel, id: id) }
        if isFirst, let connection {
            Task { try? await connection.sendWithoutReply(["SUBSCRIBE", RedisArgument(channel)]) }
        }
        return stream
    }

    /// Number of channels with at least one listener.
    public var channelCount: Int { state.withLock { $0.listeners.count } }

    private func remove(channel: String, id: Int) {
        let (connection, wasLast) = state.withLock { state in
            state.listeners[channel]?.removeAll { $0.id == id }
            let wasLast = state.listeners[channel]?.isEmpty ?? false
            if wasLast { state.listeners[channel] = nil }
            return (state.connection, wasLast)
        }
        if wasLast, let connection {
            Task { try? await connection.sendWithoutReply(["UNSUBSCRIBE", RedisArgument(channel)]) }
        }
    }

    private func push(_ value: RESPValue) {
        guard let parts = value.array, parts.count == 3, parts[0].string == "message",
              let channel = parts[1].string, case .bulkString(let payload) = parts[2] else { return }
        let listeners = state.withLock { $0.listeners[channel] ?? [] }
        for listener in listeners {
            listener.continuation.yield(RedisMessage(channel: channel, payload: payload))
        }
    }

    public func run() async throws {
        var failures = 0
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            do {
                let connection = try await RedisConnection.connect(configuration, eventLoopGroup: eventLoopGroup) { [weak self] value in
                    self?.push(value)
                }
                let channels = state.withLock { state in
                    state.connection = connection
                    return Array(state.listeners.keys)
                }
                for channel in channels {
                    try await connection.sendWithoutReply(["SUBSCRIBE", RedisArgument(channel)])
                }
                if failures > 0 { logger.info("redis subscriber reconnected", metadata: ["channels": "\(channels.count)"]) }
                failures = 0
                try await cancelWhenGracefulShutdown {
                    try await withTaskCancellationHandler {
                        try await connection.channel.closeFuture.get()
                    } onCancel: {
                        connection.close()
                    }
                }
                state.withLock { $0.connection = nil }
                if Task.isShuttingDownGracefully || Task.isCancelled { break }
                logger.warning("redis subscriber connection lost; reconnecting")
            } catch {
                state.withLock { $0.connection = nil }
                if Task.isShuttingDownGracefully || Task.isCancelled { break }
                failures += 1
                let wait = min(configuration.backoffBase * (1 << min(failures - 1, 16)), configuration.backoffMax)
                logger.warning("redis subscriber cannot connect", metadata: ["error": "\(error)", "retry_in": "\(wait)"])
                try? await Task.sleep(for: wait)
            }
        }
        let listeners = state.withLock { state in
            defer { state.listeners = [:] }
            return state.listeners.values.flatMap { $0 }
        }
        for listener in listeners { listener.continuation.finish() }
    }
}
