import Foundation

/// The services' mails, laid out alike: a greeting, paragraphs, a button for the main link and plain
/// links for the others, a footer, the app's name. Text and HTML carry the same words; everything
/// put in the HTML is escaped.
public struct MailLayout: Sendable {
    public var appName: String

    public init(appName: String) {
        self.appName = appName
    }

    public struct Link: Sendable {
        public var label: String
        public var url: String

        public init(_ label: String, _ url: String) {
            self.label = label
            self.url = url
        }
    }

    /// `links`: the first is the button; the rest follow as plain links.
    public func message(
        to: String, subject: String, greeting name: String?, paragraphs: [String], links: [Link] = [], footer: String,
        replyTo: String? = nil, unsubscribeURL: String? = nil
    ) -> MailMessage {
        let hello = name.map { "Hello \($0)," } ?? "Hello,"
        var text = hello + "\n\n" + paragraphs.joined(separator: "\n\n") + "\n\n"
        for link in links { text += "\(link.label): \(link.url)\n\n" }
        text += footer + "\n\n— \(appName)\n"
        if let unsubscribeURL { text += "\nUnsubscribe: \(unsubscribeURL)\n" }

        var html = "<!doctype html><html><body style=\"font-family: -apple-system, Helvetica, Arial, sans-serif; line-height: 1.5\">"
        html += "<p>\(Self.escape(hello))</p>"
        for paragraph in paragraphs { html += "<p>\(Self.escape(paragraph))</p>" }
        if let action = links.first {
            html +=
                "<p><a href=\"\(Self.escape(action.url))\" style=\"display: inline-block; padding: 10px 16px; background: #1a7f37; color: #fff; text-decoration: none; border-radius: 6px\">\(Self.escape(action.label))</a></p>"
            html += "<p style=\"font-size: 12px; color: #555\">Or open this link: \(Self.escape(action.url))</p>"
        }
        for link in links.dropFirst() {
            html += "<p><a href=\"\(Self.escape(link.url))\">\(Self.escape(link.label))</a></p>"
        }
        html += "<p style=\"font-size: 12px; color: #555\">\(Self.escape(footer))</p><p>— \(Self.escape(appName))</p>"
        if let unsubscribeURL { html += "<p style=\"font-size: 12px; color: #555\"><a href=\"\(Self.escape(unsubscribeURL))\">Unsubscribe</a></p>" }
        html += "</body></html>"
        return MailMessage(to: to, subject: subject, text: text, html: html, replyTo: replyTo, unsubscribeURL: unsubscribeURL)
    }

    public static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
