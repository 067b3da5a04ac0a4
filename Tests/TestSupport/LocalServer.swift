import Hummingbird
import HummingbirdCore
import Logging
import ServiceLifecycle
import Synchronization

/// A Hummingbird application on a free loopback port, run in a task of its own: the stand-ins that
/// tests start for upstreams and identity providers. `start` returns once it listens.
public final class LocalServer: Sendable {
    private let group = Mutex<ServiceGroup?>(nil)
    private let boundPort = Mutex<Int>(0)

    public init() { StallHeartbeat.started }

    public var port: Int { boundPort.withLock { $0 } }
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    public func start<Builder: HTTPResponderBuilder>(_ router: Builder, server: HTTPServerBuilder = .http1(), label: String) async throws
    where Builder.Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
        let (ready, continuation) = AsyncStream.makeStream(of: Int.self)
        TestLogging.bootstrapped
        var logger = Logger(label: label)
        logger.logLevel = .warning
        let app = Application(
            router: router, server: server, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) }, logger: logger)
        let group = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
        self.group.withLock { $0 = group }
        Task { try await group.run() }
        for await port in ready {
            boundPort.withLock { $0 = port }
            break
        }
    }

    /// Shuts the server down gracefully, without waiting: it stops accepting, and its connections
    /// close as their requests end. Cancelling its task instead could drop a connection NIO had
    /// just accepted for it, which traps ("Deinited NIOAsyncWriter without calling finish()",
    /// apple/swift-nio#2637) and ends the whole test run.
    public func stop() {
        guard let group = group.withLock({ $0 }) else { return }
        Task { await group.triggerGracefulShutdown() }
    }
}
