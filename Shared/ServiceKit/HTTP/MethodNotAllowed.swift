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

    /// The methods of the route the router would take for `path`, sorted; empty when it would take
    /// none. Walked as Hummingbird's trie walks: at each segment the most specific element that
    /// matches (a constant, then a partial capture, a partial wildcard, a capture, `*`, `**`) and no
    /// going back, so `/v1/profiles/me/followers` ends on `me/followers` (which only leads to
    /// `me/followers/{id}`) and not on `{id}/followers`.
    public func methods(for path: String) -> [String] {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        let entries = state.withLock { $0 }
        var candidates = entries.map { (components: $0.path.components[...], method: $0.route.method) }
        for segment in segments {
            // The elements at this depth that match, by the router's preference.
            let matching = candidates.compactMap { $0.components.first }.filter { $0 ~= segment }
            guard let best = matching.max(by: { Self.priority($0) < Self.priority($1) }) else { return [] }
            if best.description == "**" {
                return Array(Set(candidates.filter { $0.components.first?.description == "**" }.map(\.method))).sorted()
            }
            candidates = candidates.filter { $0.components.first?.description == best.description }.map { ($0.components.dropFirst(), $0.method) }
        }
        return Array(Set(candidates.filter { $0.components.isEmpty }.map(\.method))).sorted()
    }

    /// Hummingbird's order: constant 0, prefix or suffix capture -1, prefix or suffix wildcard -2,
    /// capture -3, `*` -4, `**` -5 (read from the element's description).
    static func priority(_ element: RouterPath.Element) -> Int {
        let text = element.description
        if text == "**" { return -5 }
        if text == "*" { return -4 }
        if text.hasPrefix("{") && text.hasSuffix("}") && text.dropFirst().firstIndex(of: "{") == nil { return -3 }
        if text.contains("*") { return -2 }
        if text.contains("{") { return -1 }
        return 0
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
