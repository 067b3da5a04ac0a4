import Foundation

/// The stack's SMTP sink (`scripts/lib/mail_sink.py`, aiosmtpd) run by a test on a port of its own.
public final class MailSink: Sendable {
    public let port: Int
    public let directory: URL
    private let process: ChildProcess

    private init(port: Int, directory: URL, process: ChildProcess) {
        self.port = port
        self.directory = directory
        self.process = process
    }

    public static func start(port: Int? = nil) async throws -> MailSink {
        let port = try port ?? RedisServer.freePort()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("mail"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let python = ProcessInfo.processInfo.environment["PYTHON"] ?? "python3"
        let script = TestEnvironment.packageRoot.appendingPathComponent("scripts/lib/mail_sink.py").path
        let process = try ChildProcess([python, script, "--port", String(port), "--dir", directory.path],
                                       outputPath: directory.appendingPathComponent("sink.log").path)
        for _ in 0..<200 {
            if RedisServer.accepts(port: port) { return MailSink(port: port, directory: directory, process: process) }
            try await Task.sleep(for: .milliseconds(25))
        }
        process.signal(SIGKILL)
        throw POSIXError(.ETIMEDOUT)
    }

    /// The messages received so far, oldest first, as text.
    public func messages() -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return files.filter { $0.hasSuffix(".eml") }.sorted().compactMap {
            try? String(contentsOf: directory.appendingPathComponent($0), encoding: .utf8)
        }
    }

    public func waitForMessages(_ count: Int, within limit: Duration = .seconds(15)) async throws -> [String] {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            let received = messages()
            if received.count >= count { return received }
            try await Task.sleep(for: .milliseconds(25))
        }
        return messages()
    }

    public func stop() {
        process.signal(SIGTERM)
    }
}
