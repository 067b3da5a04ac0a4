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

    /// `rejecting`: recipients whose address starts with it are refused with 550. `tls`: certificate
    /// and key files; STARTTLS is then required. `login`: AUTH with these credentials is required.
    public static func start(
        port: Int? = nil, rejecting: String? = nil, tls: (certificate: String, key: String)? = nil,
        login: (user: String, password: String)? = nil
    ) async throws -> MailSink {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("mail"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let python = ProcessInfo.processInfo.environment["PYTHON"] ?? "python3"
        let script = TestEnvironment.packageRoot.appendingPathComponent("scripts/lib/mail_sink.py").path
        let log = directory.appendingPathComponent("sink.log").path
        // A free port can be taken before the sink binds it: then it starts again on another one.
        for _ in 0..<5 {
            let chosen = try port ?? RedisServer.freePort()
            var arguments = [python, script, "--port", String(chosen), "--dir", directory.path]
            if let rejecting { arguments += ["--reject-prefix", rejecting] }
            if let tls { arguments += ["--tls-cert", tls.certificate, "--tls-key", tls.key] }
            if let login { arguments += ["--auth", "\(login.user):\(login.password)"] }
            let process = try ChildProcess(arguments, outputPath: log)
            if try await process.waitUntilServing(port: chosen, log: log, marker: "mail sink on") {
                return MailSink(port: chosen, directory: directory, process: process)
            }
            guard port == nil else { break }
        }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        throw MailSinkDidNotStart(log: output)
    }

    /// The messages received so far, oldest first, as text with their parts decoded.
    public func messages() -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return files.filter { $0.hasSuffix(".eml") }.sorted().compactMap {
            (try? String(contentsOf: directory.appendingPathComponent($0), encoding: .utf8)).map(Self.decoded)
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

    /// A received message with its MIME parts decoded (base64 and quoted-printable), so that a test
    /// can read the text and follow the links as a mail client would show them.
    public static func decoded(_ raw: String) -> String {
        let lines = raw.replacingOccurrences(of: "\r\n", with: "\n").components(separatedBy: "\n")
        var output: [String] = []
        var encoding: String?
        var inBody = false
        var chunk: [String] = []
        func flush() {
            let body = chunk.joined(separator: "\n")
            switch encoding {
            case "base64":
                output.append(Data(base64Encoded: body.filter { !$0.isWhitespace }).map { String(decoding: $0, as: UTF8.self) } ?? body)
            case "quoted-printable":
                output.append(Self.quotedPrintable(body))
            default:
                output.append(body)
            }
            chunk = []
        }
        for line in lines {
            if line.hasPrefix("--") {
                if inBody { flush() }
                inBody = false
                encoding = nil
                output.append(line)
                continue
            }
            if !inBody {
                output.append(line)
                if line.lowercased().hasPrefix("content-transfer-encoding:") {
                    encoding = line.split(separator: ":", maxSplits: 1).last?.trimmingCharacters(in: .whitespaces).lowercased()
                }
                if line.isEmpty { inBody = true }
                continue
            }
            chunk.append(line)
        }
        if inBody { flush() }
        return output.joined(separator: "\n")
    }

    static func quotedPrintable(_ text: String) -> String {
        var bytes: [UInt8] = []
        let source = Array(text.replacingOccurrences(of: "=\n", with: "").utf8)
        var index = 0
        while index < source.count {
            if source[index] == UInt8(ascii: "="), index + 2 < source.count, let value = UInt8(String(decoding: source[index + 1...index + 2], as: UTF8.self), radix: 16) {
                bytes.append(value)
                index += 3
            } else {
                bytes.append(source[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    public func stop() {
        process.signal(SIGTERM)
        try? FileManager.default.removeItem(at: directory)
    }
}

/// The sink exited before serving, five times: its log says why.
public struct MailSinkDidNotStart: Error, CustomStringConvertible {
    public var log: String
    public var description: String { "the mail sink did not start: \(log.suffix(400))" }
}
