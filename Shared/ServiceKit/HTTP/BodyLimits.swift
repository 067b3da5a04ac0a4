import HTTPTypes

/// How large a request body may be, by path prefix: whole segments, the longest prefix first, as
/// routes match; a `*` segment stands for any one segment (an id), and `/` for every other path.
/// The gateway holds every request to its table (`BODY_LIMITS`); a service names the routes whose
/// bodies may be larger than a JSON body (a photo's), so that what reads a body whole before the
/// route does (the idempotency middleware, to hash it) reads as far as the route would.
public struct BodyLimits: Sendable, Equatable {
    /// Prefix → bytes, longest prefix first.
    public let limits: [(prefix: String, bytes: Int)]
    /// The prefixes but `/`, each split into its segments once, in the same order; and `/`'s limit.
    private let rules: [(segments: [Substring], bytes: Int)]
    private let rootLimit: Int?

    public init(limits: [String: Int]) {
        self.limits = limits.map { (prefix: $0.key, bytes: $0.value) }.sorted { $0.prefix.count > $1.prefix.count }
        self.rules = self.limits.filter { $0.prefix != "/" }.map { (segments: $0.prefix.split(separator: "/"), bytes: $0.bytes) }
        self.rootLimit = limits["/"]
    }

    public static func == (a: BodyLimits, b: BodyLimits) -> Bool {
        a.limits.map(\.prefix) == b.limits.map(\.prefix) && a.limits.map(\.bytes) == b.limits.map(\.bytes)
    }

    /// The limit of `path`: its longest configured prefix's, or the `/` entry's, or `otherwise`.
    public func limit(for path: some StringProtocol, otherwise: Int = Self.fallback) -> Int {
        let path = Substring(path).prefix { $0 != "?" }
        for rule in rules where Self.path(path, beginsWith: rule.segments) { return rule.bytes }
        return rootLimit ?? otherwise
    }

    /// Whether a prefix other than `/` covers `path`: one of the routes given a limit of their own.
    public func lists(_ path: some StringProtocol) -> Bool {
        let path = Substring(path).prefix { $0 != "?" }
        return rules.contains { Self.path(path, beginsWith: $0.segments) }
    }

    /// Whether a path's segments begin with `wanted`, a `*` matching any one; read in place, as every
    /// request with a body asks. Empty segments are skipped on both sides, as the router skips them:
    /// `/v1/meals//analyze` reaches the analysis, so it has the analysis's limit (and takes an upload's
    /// place) too.
    static func path(_ path: Substring, beginsWith wanted: [Substring]) -> Bool {
        var rest = path[...]
        for want in wanted {
            rest = rest.drop(while: { $0 == "/" })
            guard !rest.isEmpty else { return false }
            let end = rest.firstIndex(of: "/") ?? rest.endIndex
            if want != "*" && want != rest[..<end] { return false }
            rest = rest[end...]
        }
        return true
    }

    /// The limit of a table without `/`: a JSON body's at the gateway.
    public static let fallback = 256 * 1024

    /// `413 payload_too_large`, sent before the rest of the body is read.
    public static func tooLarge(_ limit: Int) -> APIError {
        var error = APIError(.contentTooLarge, code: "payload_too_large", detail: "The request body is over this route's limit of \(Self.describe(limit)).")
        // The rest of the body is not read: the connection cannot carry another request.
        error.headers[.connection] = "close"
        return error
    }

    static func describe(_ bytes: Int) -> String {
        bytes % (1 << 20) == 0 ? "\(bytes >> 20) MiB" : bytes % (1 << 10) == 0 ? "\(bytes >> 10) KiB" : "\(bytes) bytes"
    }
}
