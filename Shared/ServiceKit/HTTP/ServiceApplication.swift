import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization

/// How every process here serves HTTP: Hummingbird's router, responder and HTTP/1 channel, behind a
/// listener of the kit's own (`HTTPListener`). The listener exists for one socket option:
/// `SO_REUSEPORT` (`HTTP_REUSE_PORT`), with which several processes of a service on one host listen
/// on the same port and the kernel spreads the connections between them. Hummingbird 2.28's
/// `ServerConfiguration` cannot ask for it, and one process's event-loop thread is what limits a
/// service on a small host (README, figures). Tests drive the same value through
/// HummingbirdTesting, which runs it with Hummingbird's own server; `run()` is what `main` runs.
public struct ServiceApplication<Responder: HTTPResponder>: ApplicationProtocol
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    public let responder: Responder
    public let configuration: ApplicationConfiguration
    public let logger: Logger
    public var services: [any Service]
    public private(set) var processesRunBeforeServerStart: [@Sendable () async throws -> Void] = []
    public let listener: HTTPListenerOptions
    let childChannel: @Sendable (@escaping HTTPChannelHandler.Responder) throws -> any ServerChildChannel

    public init<Router: HTTPResponderBuilder>(
        router: Router,
        listener: HTTPListenerOptions,
        serverName: String,
        childChannel: @escaping @Sendable (@escaping HTTPChannelHandler.Responder) throws -> any ServerChildChannel = { HTTP1Channel(responder: $0) },
        services: [any Service] = [],
        logger: Logger
    ) where Router.Responder == Responder {
        self.responder = router.buildResponder()
        self.listener = listener
        self.configuration = .init(address: .hostname(listener.host, port: listener.port), serverName: serverName, backlog: listener.backlog)
        self.childChannel = childChannel
        self.services = services
        self.logger = logger
    }

    /// The same child channel, for HummingbirdTesting's server.
    public var server: HTTPServerBuilder { HTTPServerBuilder(childChannel) }

    /// Work to finish before the port opens (migrations): the process listens only once it is done.
    public mutating func beforeServerStarts(perform process: @escaping @Sendable () async throws -> Void) {
        processesRunBeforeServerStart.append(process)
    }

    /// What Hummingbird's `ApplicationProtocol.run()` does, with the kit's listener in place of
    /// Hummingbird's server, and without Hummingbird's own `hb.request.id` in each request's logger
    /// metadata: `TelemetryMiddleware` gives every request its `request_id`.
    public func run() async throws {
        let responder = self.responder
        let logger = self.logger
        let serverName = configuration.serverName
        let date = HTTPDateHeader()
        let channel = try childChannel { request, responseWriter, channel in
            let context = Responder.Context(source: .init(channel: channel, logger: logger))
            var response: Response
            do {
                response = try await responder.respond(to: request, context: context)
            } catch let error as HTTPParserError {
                throw error
            } catch {
                logger.debug("unrecognised error", metadata: ["error.type": "\(error)"])
                response = Response(status: .internalServerError)
            }
            response.headers[.date] = date.current()
            if let serverName { response.headers[.server] = serverName }
            do {
                try await responseWriter.write(response: response.head, body: response.body)
            } catch is HTTPParserError {
                // Thrown on as it is, the parser error would be answered with a second response;
                // any other error closes the connection.
                throw ParseErrorWhileWritingResponse()
            }
        }
        let server = listening(with: channel)
        try await ServiceGroup(configuration: .init(services: services + [server], logger: logger)).run()
    }

    private func listening<ChildChannel: ServerChildChannel>(with childChannel: ChildChannel) -> any Service {
        HTTPListener(
            childChannel: childChannel, options: listener, eventLoopGroup: eventLoopGroup,
            prelude: processesRunBeforeServerStart, onServerRunning: onServerRunning, logger: logger
        )
    }
}

struct ParseErrorWhileWritingResponse: Error {}

/// Where a process listens.
public struct HTTPListenerOptions: Sendable {
    public var host: String
    public var port: Int
    /// Bind with `SO_REUSEPORT`, so that other processes that also ask for it can share the port.
    public var reusePort: Bool
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
        logger.info("listening", metadata: [
            "address": "\(options.host):\(server.channel.localAddress?.port ?? options.port)",
            "reuse_port": "\(options.reusePort)",
        ])
        await withGracefulShutdownHandler {
            await onServerRunning(server.channel)
            await withDiscardingTaskGroup { group in
                do {
                    try await server.executeThenClose { inbound in
                        for try await connection in inbound {
                            group.addTask { await childChannel.handle(value: connection, logger: logger) }
                        }
                    }
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

/// The `Date` header every answer carries (RFC 9110 §6.6.1), formatted once a second.
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
