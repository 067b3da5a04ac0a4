import Foundation

/// Just enough URL parsing for `redis://` and `postgres://` URLs, percent-decoding user and password.
public struct URLComponentsLite: Sendable {
    public var scheme: String
    public var user: String?
    public var password: String?
    public var host: String?
    public var port: Int?
    public var path: String
    public var query: [String: String]

    public init?(_ text: String) {
        guard let schemeEnd = text.range(of: "://") else { return nil }
        scheme = String(text[..<schemeEnd.lowerBound])
        var rest = Substring(text[schemeEnd.upperBound...])
        var queryItems: [String: String] = [:]
        if let q = rest.firstIndex(of: "?") {
            for pair in rest[rest.index(after: q)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                queryItems[String(parts[0])] = parts.count > 1 ? String(parts[1]).removingPercentEncodingLite : ""
            }
            rest = rest[..<q]
        }
        query = queryItems
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        path = String(rest[slash...])
        var authority = rest[..<slash]
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            authority = authority[authority.index(after: at)...]
            if let colon = userInfo.firstIndex(of: ":") {
                user = String(userInfo[..<colon]).removingPercentEncodingLite
                password = String(userInfo[userInfo.index(after: colon)...]).removingPercentEncodingLite
            } else {
                user = String(userInfo).removingPercentEncodingLite
            }
        }
        if let colon = authority.lastIndex(of: ":"), !authority.hasSuffix("]") {
            guard let number = Int(authority[authority.index(after: colon)...]) else { return nil }
            port = number
            authority = authority[..<colon]
        }
        let hostText = authority.trimmingCharacters(in: ["[", "]"])
        host = hostText.isEmpty ? nil : hostText
    }
}

extension String {
    package var removingPercentEncodingLite: String {
        var bytes: [UInt8] = []
        var iterator = Array(utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
                let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            {
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
