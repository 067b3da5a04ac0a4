import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOExtras
import NIOPosix
import ServiceKitCore
import ServiceKitDatabase
import ServiceLifecycle
import Synchronization

/// Where a process listens.
public struct HTTPListenerOptions: Sendable {
    public var host: String
    public var port: Int
    /// Bind with `SO_REUSEPORT`, so that other processes that also ask for it can share the port.
    package var reusePort: Bool
    public var backlog: Int

    public init(host: String, port: Int, reusePort: Bool = false, backlog: Int = 256) {
        self.host = host
        self.port = port
        self.reusePort = reusePort
        self.backlog = backlog
    }

    /// Read the same way by every service and the gateway.
    public init(defaultPort: Int, reading env: inout EnvironmentReader) {
        self.init(
            host: env.string("HTTP_HOST", default: "127.0.0.1"),
            port: env.int("HTTP_PORT", default: defaultPort, range: 0...65535),
            reusePort: env.bool("HTTP_REUSE_PORT", default: false)
        )
    }

    /// The internal listener's (`AdminListener`): `ADMIN_HTTP_HOST` (loopback by default) and
    /// `ADMIN_HTTP_PORT` (the public port + 1000 by default; 0, a free port, when the public one is 0).
    public static func admin(publicPort: Int, reading env: inout EnvironmentReader) -> HTTPListenerOptions {
        let fallback = publicPort == 0 ? 0 : publicPort + 1000
        return HTTPListenerOptions(
            host: env.string("ADMIN_HTTP_HOST", default: "127.0.0.1"),
            port: env.int("ADMIN_HTTP_PORT", default: fallback <= 65535 ? fallback : 0, range: 0...65535),
            backlog: 64
        )
    }
}

/// The listening socket and its connections: Hummingbird's `Server`, with `SO_REUSEPORT` when asked.
/// A graceful shutdown closes the socket, lets each connection finish the request it is answering
/// (NIO's quiescing event, which Hummingbird's HTTP/1 channel obeys), and returns when all are closed.
struct HTTPListener<ChildChannel: ServerChildChannel>: Service {
    let childChannel: ChildChannel
    let options: HTTPListenerOptions
    let eventLoopGroup: any EventLoopGroup
    let prelude: [@Sendable () async throws -> Void]
    let onServerRunning: @Sendable (any Channel) async -> Void
    let logger: Logger

    func run() async throws {
        for process in prelude { try await process() }
        // Stopped while migrating: the port never opens.
        guard !Task.isShuttingDownGracefully, !Task.isCancelled else { return }

        let quiescing = ServerQuiescingHelper(group: eventLoopGroup)
        let childChannel = self.childChannel
        let logger = self.logger
        let server = try await ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: Int32(clamping: options.backlog))
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.socketOption(NIOBSDSocket.Option(rawValue: SO_REUSEPORT)), value: options.reusePort ? 1 : 0)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiescing.makeServerChannelHandler(channel: channel))
                }
            }
            .bind(host: options.host, port: options.port, serverBackPressureStrategy: nil) { channel in
                childChannel.setup(channel: channel, logger: logger)
            }
        logger.info(
            "listening",
            metadata: [
                "address": "\(options.host):\(server.channel.localAddress?.port ?? options.port)",
                "reuse_port": "\(options.reusePort)",
            ])
        await withGracefulShutdownHandler {
            await onServerRunning(server.channel)
            await withDiscardingTaskGroup { group in
                do {
                    try await server.executeThenClose { inbound in
                        for try await connection in inbound {
                            // The connection's requests run on its channel's event loop (a task executor
                            // preference, Swift's public API), not on the runtime's pool: no hop between
                            // the two for every await. Where NIO could make the loops the global executor
                            // (`ProcessTuning`) this changes nothing; in the static release build it could not.
                            group.addTask(executorPreference: EventLoopTaskExecutor.for(connection.channel.eventLoop)) {
                                await childChannel.handle(value: connection, logger: logger)
                            }
                        }
                    }
                } catch is CancellationError {
                    // Stopped by cancellation rather than a graceful shutdown (a test's server ending).
                    logger.debug("listener cancelled")
                } catch {
                    logger.error("accepting connections failed", metadata: ["error": "\(error)"])
                }
            }
        } onGracefulShutdown: {
            // Completed once every connection has closed; `run` returns then too (the task group).
            quiescing.initiateShutdown(promise: nil)
        }
    }
}

/// The `Date` header every response carries (RFC 9110 §6.6.1), formatted once a second.
final class HTTPDateHeader: Sendable {
    private let cached = Mutex<(second: Int, text: String)>((-1, ""))

    func current() -> String {
        let now = time(nil)
        return cached.withLock { cached in
            if cached.second != now {
                cached = (now, Self.format(now))
            }
            return cached.text
        }
    }

    static func format(_ seconds: Int) -> String {
        var clock = time_t(seconds)
        var parts = tm()
        gmtime_r(&clock, &parts)
        // Day and month names written here: strftime's follow the process's locale.
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
