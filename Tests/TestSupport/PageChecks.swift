import Foundation
import HTTPTypes

extension APIReply {
    /// What every page answers with (the kit's `PageRenderer`), as the problems found: HTML, never
    /// cached, no referrer, not indexed, `nosniff`, and a Content-Security-Policy with no script.
    public var pageHeaderProblems: [String] {
        var problems: [String] = []
        func check(_ name: String, _ rule: (String) -> Bool) {
            let value = HTTPField.Name(name).flatMap { headers[$0] }
            if !(value.map(rule) ?? false) { problems.append("\(name): \(value ?? "missing")") }
        }
        check("Content-Type") { $0 == "text/html; charset=utf-8" }
        check("Cache-Control") { $0.contains("no-store") }
        check("Referrer-Policy") { $0 == "no-referrer" }
        check("X-Robots-Tag") { $0 == "noindex" }
        check("X-Content-Type-Options") { $0 == "nosniff" }
        check("Content-Security-Policy") {
            $0.contains("default-src 'none'") && $0.contains("style-src 'sha256-") && $0.contains("frame-ancestors 'none'") && $0.contains("form-action 'self'")
                && !$0.contains("unsafe") && !$0.contains("script-src")
        }
        return problems
    }
}

/// Form bodies as a browser posts a page's form.
public enum FormEncoding {
    public static let contentType = "application/x-www-form-urlencoded"

    /// `token=abc&password=salt%20%26%20pepper`: everything but RFC 3986's unreserved characters escaped.
    public static func encode(_ fields: KeyValuePairs<String, String>) -> String {
        fields.map { "\(escape($0.key))=\(escape($0.value))" }.joined(separator: "&")
    }

    static func escape(_ text: String) -> String {
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? text
    }
}
