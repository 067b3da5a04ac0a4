import Glibc
import Logging
import Synchronization

/// The log handler of every process: the line `StreamLogHandler` writes to standard error
/// (`<time> <level> <label>: <key=value …> [<source>] <message>`), but metadata is rendered only when
/// a line is written. `StreamLogHandler` renders all of it again each time one key is set, and keys
/// are set on every request (request id, user, client) and by PostgresNIO on every query: that was
/// 3–5% of a request's CPU with nothing logged at all.
package struct ServiceLogHandler: LogHandler {
    package var logLevel: Logger.Level = .info
    package var metadata: Logger.Metadata = [:]
    package var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let write: @Sendable (String) -> Void

    /// `write` receives each whole line; standard error unless a test wants the lines.
    package init(label: String, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable (String) -> Void = ServiceLogHandler.standardError) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    /// Makes every `Logger` of the process use this handler. Once per process, before any logger exists.
    package static func bootstrap() {
        LoggingSystem.bootstrap({ label, provider in ServiceLogHandler(label: label, metadataProvider: provider) }, metadataProvider: nil)
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty { all.merge(provided) { _, new in new } }
        if let explicit = event.metadata, !explicit.isEmpty { all.merge(explicit) { _, new in new } }
        if let error = event.error {
            all["error.message"] = "\(error)"
            all["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        let rendered = all.isEmpty ? "" : " " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        write("\(Self.timestamp()) \(event.level)\(label.isEmpty ? "" : " ")\(label):\(rendered) [\(event.source)] \(event.message)\n")
    }

    /// Local time to the second with the UTC offset, as `StreamLogHandler` writes it.
    package static func timestamp() -> String {
        var now = time(nil)
        var parts = tm()
        guard localtime_r(&now, &parts) != nil else { return "<unknown>" }
        var buffer = [CChar](repeating: 0, count: 64)
        let length = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static let standardErrorLock = Mutex(())

    /// Whole lines to file descriptor 2 under one lock, so lines from two threads never interleave.
    @Sendable package static func standardError(_ line: String) {
        var line = line
        line.withUTF8 { bytes in
            standardErrorLock.withLock { _ in
                var offset = 0
                while offset < bytes.count {
                    let written = Glibc.write(2, bytes.baseAddress! + offset, bytes.count - offset)
                    if written < 0 && errno == EINTR { continue }
                    guard written > 0 else { return }
                    offset += written
                }
            }
        }
    }
}
