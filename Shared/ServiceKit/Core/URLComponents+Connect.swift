import Foundation

// The settings' URLs (`postgres://`, `redis://`, `smtp://`) are read with Foundation's
// `URLComponents`; `user` and `password` come percent-decoded.
extension URLComponents {
    /// The host as a socket takes it (an IPv6 literal without its brackets); nil when the URL names
    /// none (`redis://`).
    public var hostName: String? {
        guard var host, !host.isEmpty else { return nil }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : host
    }

    /// The value of the first query parameter called `name` (`sslmode`).
    package func queryValue(_ name: String) -> String? {
        queryItems?.first { $0.name == name }?.value
    }
}
