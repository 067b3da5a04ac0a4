import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOExtras
import NIOHTTP1
import NIOPosix
import ServiceKitCore
import ServiceKitDatabase
import ServiceLifecycle

/// How every process here serves HTTP: Hummingbird's router, responder and HTTP/1 channel, behind a
/// listener of the kit's own (`HTTPListener`). The listener exists for one socket option:
/// `SO_REUSEPORT` (`HTTP_REUSE_PORT`), with which several processes of a service on one host listen
/// on the same port and the kernel spreads the connections between them. Hummingbird 2.28's
/// `ServerConfiguration` cannot ask for it, and one process's event-loop thread is what limits a
/// service on a small host (docs/BENCHMARKS.md). Tests drive the same value through
/// HummingbirdTesting, which runs it with Hummingbird's own server; `run()` is what `main` runs.
public struct ServiceApplication<Responder: HTTPResponder>: ApplicationProtocol, RouteIndexed
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    public let responder: Responder
    public let configuration: ApplicationConfiguration
    public let logger: Logger
    public var services: [any Service]
    public private(set) var processesRunBeforeServerStart: [@Sendable () async throws -> Void] = []
    public let listener: HTTPListenerOptions
    /// The routes it serves, where the builder recorded them (`buildServiceApplication` does).
    public var routeIndex: RouteIndex?
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
    package mutating func beforeServerStarts(perform process: @escaping @Sendable () async throws -> Void) {
        processesRunBeforeServerStart.append(process)
    }

    /// What Hummingbird's `ApplicationProtocol.run()` does, with the kit's listener in place of
    /// Hummingbird's server, and without Hummingbird's own `hb.request.id` in each request's logger
    /// metadata: `TelemetryMiddleware` gives every request its `request_id`.
    public func run() async throws {
        let channel = try childChannel(Self.respond(with: responder, serverName: configuration.serverName, logger: logger))
        let server = listening(with: channel)
        try await ServiceGroup(configuration: .init(services: services + [server], logger: logger)).run()
    }

    /// How each request meets the responder: a context, the `Date` and `Server` headers, and a parse
    /// error that surfaces while the response is written closing the connection instead of a second response.
    static func respond(with responder: Responder, serverName: String?, logger: Logger) -> HTTPChannelHandler.Responder {
        let date = HTTPDateHeader()
        return { request, responseWriter, channel in
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
    }

    private func listening<ChildChannel: ServerChildChannel>(with childChannel: ChildChannel) -> any Service {
        HTTPListener(
            childChannel: childChannel, options: listener, eventLoopGroup: eventLoopGroup,
            prelude: processesRunBeforeServerStart, onServerRunning: onServerRunning, logger: logger
        )
    }
}

struct ParseErrorWhileWritingResponse: Error {}

/// The internal listener every process has beside its public port (`ADMIN_HTTP_HOST`,
/// `ADMIN_HTTP_PORT`): readiness and metrics, answered by this process alone. Behind a port that
/// several processes share (`HTTP_REUSE_PORT`) a request to the public port reaches any of them, so a
/// scrape or a probe there would see a random replica. It opens at once, before migrations, so
/// readiness can say they are pending; it is a service of the application's group, so HummingbirdTesting
/// runs it too.
public struct AdminListener: Service {
    let listener: any Service

    public init<Router: HTTPResponderBuilder>(router: Router, options: HTTPListenerOptions, serverName: String, logger: Logger)
    where Router.Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
        var logger = logger
        logger[metadataKey: "listener"] = "admin"
        let channel = HTTP1Channel(responder: ServiceApplication<Router.Responder>.respond(with: router.buildResponder(), serverName: serverName, logger: logger))
        listener = HTTPListener(
            childChannel: channel, options: options, eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
            prelude: [], onServerRunning: { _ in }, logger: logger)
    }

    public func run() async throws { try await listener.run() }
}
