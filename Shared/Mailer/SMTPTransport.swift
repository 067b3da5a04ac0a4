import CCurl
import Foundation
import NIOPosix
import ServiceKit

/// Where and how to send mail: `smtp://host:port` (STARTTLS when the server offers it and
/// `SMTP_STARTTLS=required` demands it), `smtps://` for implicit TLS, optional AUTH.
public struct SMTPConfig: Sendable {
    public var url: String
    public var username: String?
    public var password: String?
    public var from: String
    public var requireTLS: Bool
    public var timeout: Duration
    /// PEM certificates to trust for the server instead of the system's (a relay with a private CA).
    /// Whenever TLS is used, the server's certificate and name are checked.
    public var caFile: String?

    public init(
        url: String, username: String? = nil, password: String? = nil, from: String, requireTLS: Bool = false, timeout: Duration = .seconds(30),
        caFile: String? = nil
    ) {
        self.url = url
        self.username = username
        self.password = password
        self.from = from
        self.requireTLS = requireTLS
        self.timeout = timeout
        self.caFile = caFile
    }

    /// Reads `SMTP_URL`, `SMTP_USERNAME`, `SMTP_PASSWORD`, `SMTP_STARTTLS`, `SMTP_CA_FILE`, `MAIL_FROM`.
    public init(reading env: inout EnvironmentReader) {
        let caFile = env.optionalString("SMTP_CA_FILE")
        if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            env.report("SMTP_CA_FILE: no readable file at \(caFile)")
        }
        let url = env.url("SMTP_URL", default: "smtp://127.0.0.1:2525", schemes: ["smtp", "smtps"], requiredInProduction: true)
        self.init(
            // `host` keeps an IPv6 literal's brackets, as a URL needs them.
            url: url.map { "\($0.scheme ?? "smtp")://\($0.host ?? "127.0.0.1"):\($0.port ?? ($0.scheme == "smtps" ? 465 : 25))" } ?? "smtp://127.0.0.1:2525",
            username: env.optionalString("SMTP_USERNAME"),
            password: env.optionalString("SMTP_PASSWORD"),
            from: env.string("MAIL_FROM", default: "Food Backend <no-reply@localhost>", requiredInProduction: true),
            // In production a password must not cross the network in clear because a server offered no TLS.
            requireTLS: env.oneOf("SMTP_STARTTLS", default: env.isProduction ? "required" : "optional", allowed: ["optional", "required"]) == "required",
            timeout: env.milliseconds("SMTP_TIMEOUT_MS", default: 30_000, range: 1_000...300_000),
            caFile: caFile
        )
    }

    /// The bare address inside `MAIL_FROM` (`Name <a@b>` → `a@b`), for the SMTP envelope.
    var envelopeFrom: String {
        guard let open = from.lastIndex(of: "<"), let close = from.lastIndex(of: ">"), open < close else { return from }
        return String(from[from.index(after: open)..<close])
    }
}

/// SMTP through libcurl (a maintained client: STARTTLS, AUTH, pipelining quirks handled), run on
/// threads of its own because `curl_easy_perform` blocks.
public struct SMTPTransport: MailTransport {
    public let config: SMTPConfig
    private let threadPool: NIOThreadPool

    /// A stalled mail server holds a thread for the whole exchange, up to `SMTP_TIMEOUT_MS` (30 s).
    /// On NIO's shared pool (a thread per core) that thread would be one password hashing needs, and
    /// sign-ins would slow down for as long as mail is stuck. A sender sends one message at a time;
    /// the second thread is for processes with several senders (the tests).
    public static let threads: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 2)
        pool.start()
        return pool
    }()

    public init(config: SMTPConfig, threadPool: NIOThreadPool = SMTPTransport.threads) {
        self.config = config
        self.threadPool = threadPool
    }

    public func send(_ message: MailMessage, messageID: String) async throws {
        let payload = Array(message.rendered(from: config.from, messageID: messageID).utf8)
        let config = self.config
        try await threadPool.runIfActive {
            try Self.perform(payload: payload, to: message.to, config: config)
        }
    }

    /// The bytes libcurl reads as the message body.
    final class Upload {
        let bytes: [UInt8]
        var offset = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }
    }

    static func perform(payload: [UInt8], to recipient: String, config: SMTPConfig) throws {
        guard !recipient.contains("\r"), !recipient.contains("\n"), recipient.contains("@") else {
            throw MailError.rejected("invalid recipient address")
        }
        guard let handle = ccurl_easy_init() else {
            throw MailError.transport(ccurl_available() == 0 ? "libcurl (libcurl4) is not installed" : "libcurl could not start")
        }
        defer { ccurl_easy_cleanup(handle) }
        let recipients: UnsafeMutablePointer<curl_slist>? = ccurl_slist_append(nil, "<\(recipient)>")
        defer { ccurl_slist_free_all(recipients) }
        let upload = Upload(payload)
        let context = Unmanaged.passUnretained(upload).toOpaque()
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)

        let code: CURLcode = errorBuffer.withUnsafeMutableBufferPointer { errors in
            _ = ccurl_set_string(handle, CURLOPT_URL, config.url)
            _ = ccurl_set_string(handle, CURLOPT_MAIL_FROM, "<\(config.envelopeFrom)>")
            _ = ccurl_set_pointer(handle, CURLOPT_MAIL_RCPT, UnsafeMutableRawPointer(recipients))
            _ = ccurl_set_long(handle, CURLOPT_UPLOAD, 1)
            _ = ccurl_set_long(handle, CURLOPT_NOSIGNAL, 1)
            _ = ccurl_set_long(handle, CURLOPT_TIMEOUT_MS, Int(config.timeout.components.seconds * 1000))
            _ = ccurl_set_long(handle, CURLOPT_CONNECTTIMEOUT_MS, 10_000)
            _ = ccurl_set_long(handle, CURLOPT_USE_SSL, Int(config.requireTLS ? CURLUSESSL_ALL.rawValue : CURLUSESSL_TRY.rawValue))
            _ = ccurl_set_pointer(handle, CURLOPT_ERRORBUFFER, errors.baseAddress)
            if let username = config.username { _ = ccurl_set_string(handle, CURLOPT_USERNAME, username) }
            if let password = config.password { _ = ccurl_set_string(handle, CURLOPT_PASSWORD, password) }
            if let caFile = config.caFile { _ = ccurl_set_string(handle, CURLOPT_CAINFO, caFile) }
            _ = ccurl_set_pointer(handle, CURLOPT_READDATA, context)
            _ = ccurl_set_read_callback(handle) { buffer, size, count, context in
                guard let buffer, let context else { return 0 }
                let upload = Unmanaged<Upload>.fromOpaque(context).takeUnretainedValue()
                let length = min(size * count, upload.bytes.count - upload.offset)
                guard length > 0 else { return 0 }
                upload.bytes.withUnsafeBufferPointer { bytes in
                    UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress! + upload.offset, byteCount: length)
                }
                upload.offset += length
                return length
            }
            return ccurl_easy_perform(handle)
        }
        withExtendedLifetime(upload) {}
        guard code == CURLE_OK else {
            let detail = String(decoding: errorBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let summary = String(cString: ccurl_easy_strerror(code))
            var response: Int = 0
            _ = withUnsafeMutablePointer(to: &response) { pointer in
                ccurl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, pointer)
            }
            let message = detail.isEmpty ? summary : "\(summary): \(detail)"
            // Refused credentials (535) are this server's configuration, not the message's fault.
            if code == CURLE_LOGIN_DENIED { throw MailError.credentialsRefused("\(message) (SMTP \(response)): check SMTP_USERNAME and SMTP_PASSWORD") }
            // Other 5xx from the server are permanent (bad address, refused); anything else may pass later.
            if (500..<600).contains(response) { throw MailError.rejected("\(message) (SMTP \(response))") }
            throw MailError.transport(message)
        }
    }
}

public enum MailError: Error, CustomStringConvertible, Equatable {
    /// The server refused the message for good: retrying will not help.
    case rejected(String)
    /// The server could not be reached or the exchange broke: retry later.
    case transport(String)
    /// The server refused our credentials: no message can go until the operator fixes them, so
    /// messages wait (tried again every `MailSender.credentialsRetry`) instead of using up their attempts.
    case credentialsRefused(String)

    public var description: String {
        switch self {
        case .rejected(let why): "mail rejected: \(why)"
        case .transport(let why): "mail not sent: \(why)"
        case .credentialsRefused(let why): "mail not sent, credentials refused: \(why)"
        }
    }

    public var isPermanent: Bool {
        if case .rejected = self { return true }
        return false
    }

    /// Whether this failure counts toward the message's `maxAttempts`: not when the fault is ours.
    public var countsAsAttempt: Bool {
        if case .credentialsRefused = self { return false }
        return true
    }
}
