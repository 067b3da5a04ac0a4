import Foundation
import ServiceKit

/// One message to send: plain text and HTML alternatives.
public struct MailMessage: Codable, Sendable, Equatable {
    public var to: String
    public var subject: String
    public var text: String
    public var html: String?
    /// Where replies go (a coach's own address for their invitation), when not to the sender.
    public var replyTo: String?
    /// The https URL of one-click unsubscribe (RFC 8058): sent as `List-Unsubscribe` with
    /// `List-Unsubscribe-Post`, so mail clients offer the button and POST to it.
    public var unsubscribeURL: String?

    public init(to: String, subject: String, text: String, html: String? = nil, replyTo: String? = nil, unsubscribeURL: String? = nil) {
        self.to = to
        self.subject = subject
        self.text = text
        self.html = html
        self.replyTo = replyTo
        self.unsubscribeURL = unsubscribeURL
    }

    /// The RFC 5322 message, with a multipart/alternative body when there is HTML. Header values are
    /// RFC 2047-encoded when they are not plain ASCII, and CR/LF in them cannot inject headers.
    public func rendered(from: String, messageID: String, date: Date = Date()) -> String {
        func header(_ value: String) -> String {
            let clean = value.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
            if clean.allSatisfy({ $0.isASCII }) { return clean }
            return "=?UTF-8?B?\(Data(clean.utf8).base64EncodedString())?="
        }
        let dateFormatter = DateFormatter()
        dateFormatter.locale = Locale(identifier: "en_US_POSIX")
        dateFormatter.timeZone = TimeZone(identifier: "UTC")
        dateFormatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss Z"
        var lines = [
            "From: \(header(from))",
            "To: \(header(to))",
            "Subject: \(header(subject))",
            "Date: \(dateFormatter.string(from: date))",
            "Message-ID: <\(messageID)>",
            "MIME-Version: 1.0",
        ]
        if let replyTo { lines.append("Reply-To: \(header(replyTo))") }
        if let unsubscribeURL {
            lines.append("List-Unsubscribe: <\(header(unsubscribeURL))>")
            lines.append("List-Unsubscribe-Post: List-Unsubscribe=One-Click")
        }
        func part(_ body: String, type: String) -> [String] {
            ["Content-Type: \(type); charset=utf-8", "Content-Transfer-Encoding: base64", "", Self.wrapped(Data(body.utf8).base64EncodedString())]
        }
        if let html {
            let boundary = "=_alt_\(UUID().uuidString.lowercased())"
            lines += ["Content-Type: multipart/alternative; boundary=\"\(boundary)\"", "", "--\(boundary)"]
            lines += part(text, type: "text/plain")
            lines += ["--\(boundary)"]
            lines += part(html, type: "text/html")
            lines += ["--\(boundary)--", ""]
        } else {
            lines += part(text, type: "text/plain")
        }
        return lines.joined(separator: "\r\n")
    }

    static func wrapped(_ base64: String) -> String {
        var lines: [Substring] = []
        var rest = Substring(base64)
        while !rest.isEmpty {
            lines.append(rest.prefix(76))
            rest = rest.dropFirst(76)
        }
        return lines.joined(separator: "\r\n")
    }
}

/// Something that delivers one message or throws why it could not.
public protocol MailTransport: Sendable {
    func send(_ message: MailMessage, messageID: String) async throws
}
