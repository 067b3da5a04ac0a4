import Hummingbird
import Synchronization

/// The routes a process serves (method and path template, as its router has them), filled in once
/// the routes are added. The router answers a path it has under another method as it answers a
/// path it does not have (404); with this index `MethodNotAllowedMiddleware` says 405 and which
/// methods the path has, and the contract tests compare it with the OpenAPI document.
public final class RouteIndex: Sendable {
    public struct Route: Sendable, Hashable, CustomStringConvertible {
        public var method: String
        /// `/v1/profiles/{id}`, as the router describes it.
        public var path: String
        public var description: String { "\(method) \(path)" }
    }

    private let state = Mutex<[(route: Route, path: RouterPath)]>([])

    public init() {}

    /// Records every route of `router` (call it after the last route is added).
    public func record<Context>(_ router: Router<Context>) {
        let routes = router.routes.map { (route: Route(method: $0.method.rawValue, path: $0.path.description), path: $0.path) }
        state.withLock { $0 = routes }
    }

    public var routes: [Route] { state.withLock { $0.map(\.route) } }

    /// The methods of the route the router would take for `path`, sorted; empty when no route has
    /// it. Where several templates match, the router takes the most specific (a constant segment
    /// before a capture, a capture before a wildcard: `/v1/profiles/me/avatar` before
    /// `/v1/profiles/{id}/avatar`), and so does this.
    public func methods(for path: String) -> [String] {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        let matching = state.withLock { entries in entries.filter { Self.matches($0.path.components, segments[...]) } }
        guard let best = matching.map(\.path).min(by: { Self.moreSpecific($0.components, $1.components) }) else { return [] }
        return Array(Set(matching.filter { $0.path.description == best.description }.map(\.route.method))).sorted()
    }

    /// Whether `a` is taken before `b`: compared segment by segment, the first that differs decides.
    static func moreSpecific(_ a: [RouterPath.Element], _ b: [RouterPath.Element]) -> Bool {
        for (x, y) in zip(a, b) where x.description != y.description {
            return rank(x) < rank(y)
        }
        return a.count > b.count
    }

    /// 0 a constant, 1 a capture or a partial wildcard, 2 `*`, 3 `**`.
    static func rank(_ element: RouterPath.Element) -> Int {
        let text = element.description
        if text == "**" { return 3 }
        if text == "*" { return 2 }
        if text.contains("{") || text.contains("*") { return 1 }
        return 0
    }

    static func matches(_ components: [RouterPath.Element], _ segments: ArraySlice<Substring>) -> Bool {
        guard let first = components.first else { return segments.isEmpty }
        if first.description == "**" { return true }
        guard let segment = segments.first, first ~= segment else { return false }
        return matches(Array(components.dropFirst()), segments.dropFirst())
    }
}

/// An application that can say which routes it serves.
public protocol RouteIndexed {
    var routeIndex: RouteIndex? { get }
}

/// Answers `405 method_not_allowed` with `Allow` for a path the router has under other methods (it
/// would be a 404 otherwise), as RFC 9110 §15.5.6 asks. A handler's own 404 (an `APIError`) passes.
public struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    let index: RouteIndex

    public init(index: RouteIndex) { self.index = index }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            let allowed = index.methods(for: request.uri.path)
            guard !allowed.isEmpty, !allowed.contains(request.method.rawValue) else { throw error }
            let allow = allowed.joined(separator: ", ")
            throw APIError(
                .methodNotAllowed, code: "method_not_allowed", detail: "\(request.method.rawValue) is not allowed here; allowed: \(allow).",
                headers: [.allow: allow])
        }
    }
}
