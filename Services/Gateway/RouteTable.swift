import ServiceKit

/// Which service answers which path prefix (services.txt; the table in ARCHITECTURE.md). A prefix
/// matches whole path segments: `/v1/auth` takes `/v1/auth` and `/v1/auth/login`, never `/v1/authors`.
/// The pages the mails and share links open go to the service that owns their data: `/shared` is the
/// page, `/v1/shared` the API, and neither takes the other.
struct RouteTable: Sendable {
    /// services.txt's prefixes column, through the generated `ServiceRegistry`.
    static let standard = RouteTable(routes: ServiceRegistry.all.flatMap { service in service.prefixes.map { ($0, service.name) } })

    /// Longest prefix first, so a more specific route wins.
    let routes: [(prefix: String, service: String)]
    private let prefixes: [[UInt8]]

    init(routes: [(String, String)]) {
        self.routes = routes.map { (prefix: $0.0, service: $0.1) }.sorted { $0.prefix.count > $1.prefix.count }
        self.prefixes = self.routes.map { Array($0.prefix.utf8) }
    }

    /// Compared byte by byte on contiguous UTF-8: `String`'s own prefix test works on characters,
    /// and cost more than the rest of routing a proxied request.
    func service(for path: some StringProtocol) -> String? {
        var path = String(path)
        return path.withUTF8 { bytes in
            for (index, prefix) in prefixes.enumerated() where bytes.starts(with: prefix) {
                if bytes.count == prefix.count || bytes[prefix.count] == UInt8(ascii: "/") { return routes[index].service }
            }
            return nil
        }
    }
}
