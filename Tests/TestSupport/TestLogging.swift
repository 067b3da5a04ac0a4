import Foundation
import Logging

/// The tests' log output: swift-log's standard-error handler, less two expected lines, logged at
/// debug. A test server that stops (HummingbirdTesting's, `LocalServer`) cancels its connections, and
/// Hummingbird logs each cancelled one as an error ("Waiting on child channel: CancellationError()"):
/// it is how a server in a test ends, not a fault. And `withClient` starts a pool's `run()` in a task
/// and uses the pool at once, so PostgresNIO warns that a connection was asked for before `run()`
/// began; the request waits for it, and the warning was half of a run's output. Everything else is
/// printed as it comes.
public enum TestLogging {
    /// Bootstraps once per test process; every harness reaches it through `TestEnvironment.logger`.
    public static let bootstrapped: Void = {
        LoggingSystem.bootstrap { label in ShutdownQuietHandler(inner: StreamLogHandler.standardError(label: label)) }
    }()
}

struct ShutdownQuietHandler: LogHandler {
    var inner: StreamLogHandler

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String, file: String, function: String, line: UInt) {
        var level = level
        if level == .error, source == "HummingbirdCore", message.description.hasSuffix("CancellationError()") {
            level = .debug
            guard logLevel <= .debug else { return }
        }
        if level == .warning, source == "PostgresNIO", message.description.hasSuffix("`PostgresClient.run()` hasn't been called yet.") {
            level = .debug
            guard logLevel <= .debug else { return }
        }
        inner.log(level: level, message: message, metadata: metadata, source: source, file: file, function: function, line: line)
    }
}
