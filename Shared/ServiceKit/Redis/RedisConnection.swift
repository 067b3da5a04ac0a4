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

    static func connect(
        _ configuration: RedisConfiguration,
        eventLoopGroup: any EventLoopGroup,
        onPush: (@Sendable (RESPValue) -> Void)? = nil
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
                .connect(host: configuration.host, port: configuration.port)
                .get()
        } catch {
            throw RedisError.unavailable("cannot connect to \(configuration.host):\(configuration.port): \(error)")
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
    /// Turns an error reply into a thrown `RedisError.server`.
    @discardableResult
    package func checked() throws -> RESPValue {
        if case .error(let message) = self { throw RedisError.server(message) }
        return self
    }
}
