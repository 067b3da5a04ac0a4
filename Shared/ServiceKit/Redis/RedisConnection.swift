import Foundation
import NIOCore
import NIOPosix
import ServiceKitCore

/// Where Redis is and how long to wait for it.
public struct RedisConfiguration: Sendable {
    public var host: String
    public var port: Int
    public var password: String?
    public var database: Int
    /// Connections in the command pool; pipelining makes a few enough.
    public var poolSize: Int
    public var connectTimeout: TimeAmount
    package var commandTimeout: TimeAmount
    /// First and largest wait between reconnect attempts.
    package var backoffBase: Duration
    package var backoffMax: Duration
    /// Redis Sentinel: the sentinels to ask where the primary named `sentinelPrimary` is. With none,
    /// `host` and `port` are Redis itself.
    public var sentinels: [SentinelAddress] = []
    public var sentinelPrimary = "foodbackend"
    /// Replicas that must hold a relayed batch of events before the relay takes it as sent (`WAIT`),
    /// so that a failover to a replica loses none; zero without sentinels.
    public var replicasToWaitFor = 0

    /// What the client connects to, for messages: the address, or the sentinels' primary.
    var target: String {
        sentinels.isEmpty ? "\(host):\(port)" : "the primary \(sentinelPrimary) (Redis Sentinel)"
    }

    public struct SentinelAddress: Sendable, Equatable {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
    }

    public init(
        host: String = "127.0.0.1", port: Int = 6379, password: String? = nil, database: Int = 0, poolSize: Int = 4,
        connectTimeout: TimeAmount = .seconds(2), commandTimeout: TimeAmount = .seconds(5),
        backoffBase: Duration = .milliseconds(50), backoffMax: Duration = .seconds(2)
    ) {
        self.host = host
        self.port = port
        self.password = password
        self.database = database
        self.poolSize = poolSize
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.backoffBase = backoffBase
        self.backoffMax = backoffMax
    }

    /// Reads `redis://[:password@]host[:port][/db]`.
    public init?(url: String) {
        guard let components = URLComponents(string: url), components.scheme == "redis", let host = components.hostName else { return nil }
        self.init(host: host, port: components.port ?? 6379, password: components.password, database: Int(components.path.dropFirst()) ?? 0)
    }
}

/// One TCP connection to Redis with hiredis doing the protocol.
final class RedisConnection: Sendable {
    let channel: any Channel

    private init(channel: any Channel) {
        self.channel = channel
    }

    /// A connection to Redis, or with sentinels, to the primary they name, once it says it is one
    /// (`ROLE`): a primary just demoted still answers until the sentinels reconfigure it.
    static func connect(
        _ configuration: RedisConfiguration,
        eventLoopGroup: any EventLoopGroup,
        onPush: (@Sendable (RESPValue) -> Void)? = nil
    ) async throws -> RedisConnection {
        guard !configuration.sentinels.isEmpty else {
            return try await open(configuration.host, configuration.port, configuration, eventLoopGroup: eventLoopGroup, onPush: onPush)
        }
        let (host, port) = try await primary(configuration, eventLoopGroup: eventLoopGroup)
        let connection = try await open(host, port, configuration, eventLoopGroup: eventLoopGroup, onPush: onPush)
        do {
            let role = try await connection.send(["ROLE"], timeout: configuration.commandTimeout).checked()
            guard role.array?.first?.string == "master" else { throw RedisError.unavailable("\(host):\(port) is not the primary (yet)") }
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// Where the sentinels say the primary is: the first that answers is believed.
    private static func primary(_ configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup) async throws -> (String, Int) {
        var problems: [String] = []
        for sentinel in configuration.sentinels {
            do {
                var direct = configuration
                direct.password = nil
                direct.database = 0
                let connection = try await open(sentinel.host, sentinel.port, direct, eventLoopGroup: eventLoopGroup, onPush: nil)
                defer { connection.close() }
                let reply = try await connection.send(
                    ["SENTINEL", "get-master-addr-by-name", RedisArgument(configuration.sentinelPrimary)], timeout: configuration.commandTimeout
                ).checked()
                if let parts = reply.array, parts.count == 2, let host = parts[0].string, let port = parts[1].string.flatMap({ Int($0) }) {
                    return (host, port)
                }
                problems.append("\(sentinel.host):\(sentinel.port) knows no primary \(configuration.sentinelPrimary)")
            } catch {
                problems.append("\(sentinel.host):\(sentinel.port): \(error)")
            }
        }
        throw RedisError.unavailable("no sentinel named the primary: " + problems.joined(separator: "; "))
    }

    private static func open(
        _ host: String, _ port: Int, _ configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup, onPush: (@Sendable (RESPValue) -> Void)?
    ) async throws -> RedisConnection {
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: eventLoopGroup)
                .connectTimeout(configuration.connectTimeout)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelOption(.socketOption(.so_keepalive), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(RedisChannelHandler(onPush: onPush))
                    }
                }
                .connect(host: host, port: port)
                .get()
        } catch {
            throw RedisError.unavailable("cannot connect to \(host):\(port): \(error)")
        }
        let connection = RedisConnection(channel: channel)
        do {
            if let password = configuration.password {
                _ = try await connection.send(["AUTH", RedisArgument(password)], timeout: configuration.commandTimeout).checked()
            }
            if configuration.database != 0 {
                _ = try await connection.send(["SELECT", RedisArgument(configuration.database)], timeout: configuration.commandTimeout).checked()
            }
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    var isActive: Bool { channel.isActive }

    func send(_ arguments: [RedisArgument], timeout: TimeAmount?) async throws -> RESPValue {
        let promise = channel.eventLoop.makePromise(of: RESPValue.self)
        channel.writeAndFlush(RedisRequest(arguments: arguments, promise: promise, timeout: timeout)).whenFailure { error in
            promise.fail(error)
        }
        do {
            return try await promise.futureResult.get()
        } catch is ChannelError {
            throw RedisError.connectionClosed
        }
    }

    /// Writes a command without flushing and returns its reply's future; for pipelines.
    func enqueue(_ arguments: [RedisArgument], timeout: TimeAmount?) -> EventLoopFuture<RESPValue> {
        let promise = channel.eventLoop.makePromise(of: RESPValue.self)
        channel.write(RedisRequest(arguments: arguments, promise: promise, timeout: timeout)).whenFailure { error in
            promise.fail(error)
        }
        return promise.futureResult
    }

    /// Queues a command with no reply expected; writes keep the order of the calls.
    func write(_ arguments: [RedisArgument]) {
        channel.writeAndFlush(RedisRequest(arguments: arguments, promise: nil, timeout: nil), promise: nil)
    }

    func close() {
        channel.close(promise: nil)
    }
}

extension RESPValue {
    /// A write refused by a replica: the connection is to a primary that was demoted in a failover.
    var isReadOnlyRefusal: Bool {
        if case .error(let message) = self { return message.hasPrefix("READONLY") }
        return false
    }

    /// Turns an error reply into a thrown `RedisError.server`.
    @discardableResult
    package func checked() throws -> RESPValue {
        if case .error(let message) = self { throw RedisError.server(message) }
        return self
    }
}
