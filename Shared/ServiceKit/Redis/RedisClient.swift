import Logging
import NIOCore
import NIOPosix
import ServiceKitCore
import Synchronization

/// A small pool of pipelined Redis connections. Commands never block an event loop: SwiftNIO does the
/// I/O and hiredis the protocol. A dropped connection is replaced on the next command, with backoff
/// between failed attempts so that a dead server is not hammered; during the backoff commands fail fast
/// with `RedisError.unavailable`.
public final class RedisClient: Sendable {
    package let configuration: RedisConfiguration
    private let slots: [ConnectionSlot]
    private let next = Atomic<Int>(0)

    public init(configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger) {
        self.configuration = configuration
        self.slots = (0..<max(1, configuration.poolSize)).map { _ in
            ConnectionSlot(configuration: configuration, eventLoopGroup: eventLoopGroup, logger: logger)
        }
    }

    /// Sends one command and returns its reply; an error reply is thrown as `RedisError.server`.
    /// `extraTimeout` lengthens the deadline for blocking commands (`XREADGROUP … BLOCK`).
    @discardableResult
    public func send(_ arguments: [RedisArgument], extraTimeout: TimeAmount = .zero) async throws -> RESPValue {
        let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
        let slot = slots[abs(index % slots.count)]
        let connection = try await slot.connection()
        let reply: RESPValue
        do {
            reply = try await connection.send(arguments, timeout: configuration.commandTimeout + extraTimeout)
        } catch let error as RedisError where error == .connectionClosed {
            slot.dropped(connection)
            throw error
        }
        // A primary demoted in a failover: the next command connects to the new one.
        if reply.isReadOnlyRefusal { slot.dropped(connection) }
        return try reply.checked()
    }

    /// Sends commands back to back on one connection and returns their replies in order: one round
    /// trip for the lot, and the server applies them in this order. Error replies are returned, not thrown.
    public func pipeline(_ commands: [[RedisArgument]]) async throws -> [RESPValue] {
        guard !commands.isEmpty else { return [] }
        let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
        let slot = slots[abs(index % slots.count)]
        let connection = try await slot.connection()
        let futures = commands.map { connection.enqueue($0, timeout: configuration.commandTimeout) }
        connection.channel.flush()
        var replies: [RESPValue] = []
        replies.reserveCapacity(futures.count)
        do {
            for future in futures { replies.append(try await future.get()) }
        } catch is ChannelError {
            slot.dropped(connection)
            throw RedisError.connectionClosed
        } catch let error as RedisError where error == .connectionClosed {
            slot.dropped(connection)
            throw error
        }
        if replies.contains(where: \.isReadOnlyRefusal) { slot.dropped(connection) }
        return replies
    }

    @discardableResult
    public func send(_ arguments: RedisArgument...) async throws -> RESPValue {
        try await send(arguments)
    }

    /// Closes every connection; later commands reconnect.
    public func close() async {
        for slot in slots { await slot.close() }
    }
}

/// One pool slot: at most one connection and at most one connect attempt at a time.
final class ConnectionSlot: Sendable {
    private struct State {
        var connection: RedisConnection?
        var connecting: Task<RedisConnection, any Error>?
        var failures = 0
        var retryAt = ContinuousClock.now
    }

    private let configuration: RedisConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex(State())

    init(configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup, logger: Logger) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
    }

    private enum Lease {
        case ready(RedisConnection)
        case pending(Task<RedisConnection, any Error>)
    }

    func connection() async throws -> RedisConnection {
        // The hot path (a live connection) takes the lock once and creates no task.
        let lease: Lease = try state.withLock { state in
            if let connection = state.connection, connection.isActive { return .ready(connection) }
            if let connecting = state.connecting { return .pending(connecting) }
            let now = ContinuousClock.now
            if state.failures > 0, now < state.retryAt {
                throw RedisError.unavailable("reconnecting to \(configuration.target) after \(state.failures) failed attempt(s)")
            }
            let configuration = self.configuration
            let group = self.eventLoopGroup
            let task = Task { try await RedisConnection.connect(configuration, eventLoopGroup: group) }
            state.connecting = task
            return .pending(task)
        }
        let task: Task<RedisConnection, any Error>
        switch lease {
        case .ready(let connection): return connection
        case .pending(let pending): task = pending
        }
        do {
            let connection = try await task.value
            state.withLock { state in
                if state.connecting != nil {
                    state.connection = connection
                    state.connecting = nil
                    if state.failures > 0 {
                        logger.info("redis reconnected", metadata: ["redis": "\(configuration.target)"])
                    }
                    state.failures = 0
                }
            }
            return connection
        } catch {
            state.withLock { state in
                guard state.connecting != nil else { return }
                state.connecting = nil
                state.failures += 1
                let exponent = min(state.failures - 1, 16)
                let wait = min(configuration.backoffBase * (1 << exponent), configuration.backoffMax)
                state.retryAt = ContinuousClock.now + wait
            }
            throw error
        }
    }

    func dropped(_ connection: RedisConnection) {
        state.withLock { state in
            if state.connection === connection { state.connection = nil }
        }
        connection.close()
    }

    func close() async {
        let connection = state.withLock { state in
            defer { state.connection = nil; state.connecting = nil }
            return state.connection
        }
        connection?.close()
    }
}
