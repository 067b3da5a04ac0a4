import HTTPTypes
import Hummingbird
import Logging
import ServiceKitCore
import ServiceKitDatabase

extension HTTPField.Name {
    public static let requestID = HTTPField.Name("X-Request-ID")!
    package static let forwardedFor = HTTPField.Name("X-Forwarded-For")!
    /// Set by the gateway on a request whose bearer token's session ended (`TokenMiddleware`).
    public static let sessionEnded = HTTPField.Name("X-Session-Ended")!
}

/// Gives every request an id (the caller's `X-Request-ID` when it is sane, a new one otherwise) and
/// its client's address, echoes the id on the response, logs one line per request and records
/// request metrics.
public struct TelemetryMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    let metrics: HTTPMetrics
    let trustedProxies: TrustedProxies
    let routeOutsideRouter: @Sendable (Request) -> String?

    /// The default trusts the private networks, as services do (`TRUSTED_PROXIES`).
    /// `routeOutsideRouter` names the route of a request that a middleware answered without the
    /// router (the gateway's proxied requests), for the metrics; otherwise such requests are "unmatched".
    public init(
        metrics: HTTPMetrics, trustedProxies: TrustedProxies = .privateNetworks,
        routeOutsideRouter: @escaping @Sendable (Request) -> String? = { _ in nil }
    ) {
        self.metrics = metrics
        self.trustedProxies = trustedProxies
        self.routeOutsideRouter = routeOutsideRouter
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        var context = context
        let requestID = RequestIDs.id(from: request.headers[.requestID])
        context.requestID = requestID
        context.clientAddress = trustedProxies.client(peer: context.clientAddress, forwardedFor: request.headers[.forwardedFor])
        context.logger[metadataKey: "request_id"] = .string(requestID)
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            // Errors should have been turned into problems already; this is the last line.
            response = ProblemMiddleware<Context>.response(for: error, request: request, context: context)
        }
        response.headers[.requestID] = requestID
        let duration = ContinuousClock.now - started
        let route = context.endpointPath ?? routeOutsideRouter(request) ?? "unmatched"
        metrics.record(method: request.method.rawValue, route: route, status: Int(response.status.code), duration: duration)
        RequestLog.write(
            context.logger, method: request.method.rawValue, path: request.uri.path, client: context.clientAddress,
            status: response.status.code, duration: duration)
        return response
    }
}

/// The one line logged per request, by `TelemetryMiddleware` and by the gateway's proxy alike.
package enum RequestLog {
    /// Paths whose next segment is a secret, with the words that are not: an invitation's code is
    /// the key to the invitation, a share link's token the key to the meal, and logs are read by
    /// more people than the database.
    static let secretSegments: [(prefix: String, words: Set<String>)] = [
        ("/v1/invitations/", ["mine", "unsubscribe"]), ("/v1/shared/", []), ("/shared/", []),
    ]

    /// Query parameters whose value is a secret: the event stream's ticket stands for an access
    /// token for a minute. The line logs the path alone, without the query; this holds should a
    /// caller pass the whole target.
    static let secretParameters: Set<Substring> = ["ticket"]

    /// `path` with every secret segment and secret query value written `[redacted]`.
    package static func redacted(_ path: String) -> String {
        guard let mark = path.firstIndex(of: "?") else { return redactedSegments(path) }
        let query = path[path.index(after: mark)...].split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            let name = pair.prefix { $0 != "=" }
            return secretParameters.contains(name) && name.count < pair.count ? String(name) + "=[redacted]" : String(pair)
        }
        return redactedSegments(String(path[..<mark])) + "?" + query.joined(separator: "&")
    }

    /// Segments are compared as the routers see them: both Hummingbird's and the gateway's skip
    /// empty segments, so `/v1/shared//x` opens the share `x`, and percent-encoded letters are read
    /// as what they encode. The rest of the path is logged as it came.
    static func redactedSegments(_ path: String) -> String {
        guard path.contains("%") || secretSegments.contains(where: { path.contains($0.prefix.split(separator: "/").last ?? "") }) else { return path }
        var segments = path.split(separator: "/", omittingEmptySubsequences: false)
        let named = segments.indices.filter { !segments[$0].isEmpty }
        func read(_ segment: Substring) -> String { String(segment).removingPercentEncoding ?? String(segment) }
        for (prefix, words) in secretSegments {
            let wanted = prefix.split(separator: "/")
            guard named.count > wanted.count, zip(named, wanted).allSatisfy({ read(segments[$0.0]) == $0.1 }) else { continue }
            let secret = named[wanted.count]
            guard !words.contains(read(segments[secret])) else { return path }
            segments[secret] = "[redacted]"
            return segments.joined(separator: "/")
        }
        return path
    }

    package static func write(_ logger: Logger, method: String, path: String, client: String, status: Int, duration: Duration) {
        logger.info(
            "request",
            metadata: [
                "method": .string(method),
                "path": .string(redacted(path)),
                "client": .string(client),
                "status": .stringConvertible(status),
                "duration_ms": .string(String(format: "%.2f", Double(duration.components.attoseconds) / 1e15 + Double(duration.components.seconds) * 1000)),
            ])
    }
}
