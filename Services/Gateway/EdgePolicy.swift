import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ServiceKit
import Synchronization

/// The gateway's body limits: `BODY_LIMITS`, `prefix=size` pairs over the defaults below, `/` for
/// every other path. Avatars and meal photos take images, everything else JSON. A body over its
/// limit is `413 payload_too_large` before the gateway reads past the limit: at once when its
/// `Content-Length` says so, else as its chunks add up.
extension BodyLimits {
    /// A meal photo: nutrition's own limit at its default (`MEAL_PHOTO_MAX_BYTES`, 10 MiB) and the
    /// 16 KiB a multipart body may add for its other fields.
    static let mealPhoto = 10 * 1024 * 1024 + 16 * 1024
    static let standard = BodyLimits(limits: [
        "/": 256 * 1024, "/v1/profiles/me/avatar": 5 * 1024 * 1024, "/v1/meals/analyze": mealPhoto, "/v1/meals/*/photo": mealPhoto,
    ])

    /// `BODY_LIMITS`: `/v1/meals/*/photo=10MiB,/=256KiB` (sizes in B, KiB or MiB); entries given
    /// replace the defaults' of the same prefix, the others stay.
    init(reading env: inout EnvironmentReader) {
        var limits = Dictionary(uniqueKeysWithValues: Self.standard.limits.map { ($0.prefix, $0.bytes) })
        if let text = env.optionalString("BODY_LIMITS") {
            for entry in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
                let parts = entry.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2, parts[0].hasPrefix("/"), let bytes = Self.bytes(parts[1]), bytes > 0 else {
                    env.report("BODY_LIMITS: each entry is /path=size (size in B, KiB or MiB), got \"\(entry)\"")
                    continue
                }
                limits[parts[0].count > 1 && parts[0].hasSuffix("/") ? String(parts[0].dropLast()) : parts[0]] = bytes
            }
        }
        self.init(limits: limits)
    }

    static func bytes(_ text: String) -> Int? {
        let units: [(String, Int)] = [("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)]
        for (unit, factor) in units where text.hasSuffix(unit) {
            return Int(text.dropLast(unit.count).trimmingCharacters(in: .whitespaces)).flatMap { $0 <= Int.max / factor ? $0 * factor : nil }
        }
        return Int(text)
    }
}

/// Cross-origin requests from the web origins in `CORS_ALLOWED_ORIGINS` (none by default: the apps
/// are native and need none). Preflights are answered here and never reach a service; a listed
/// origin gets its own name back with credentials allowed, any other origin no CORS header at all
/// (and `403` to a preflight), so a browser keeps its pages from reading the responses.
struct CORSPolicy: Sendable, Equatable {
    var allowedOrigins: Set<String> = []

    static let methods = "GET, POST, PUT, PATCH, DELETE"
    static let requestHeaders = "Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match, Last-Event-ID, X-Request-ID"
    static let exposedHeaders = "ETag, Location, Retry-After, RateLimit, RateLimit-Policy, X-Request-ID"
    static let maxAgeSeconds = 600

    var isEnabled: Bool { !allowedOrigins.isEmpty }

    func allows(_ origin: String?) -> Bool {
        guard let origin else { return false }
        return allowedOrigins.contains(origin)
    }

    /// What a response to a request from `origin` carries: the origin's own name when listed, and
    /// `Vary: Origin` whenever CORS is on, so a cache never gives one origin's response to another.
    func responseHeaders(origin: String?) -> [(HTTPField.Name, String)] {
        guard isEnabled else { return [] }
        guard let origin, allows(origin) else { return [(.vary, "Origin")] }
        return [
            (.accessControlAllowOrigin, origin), (.accessControlAllowCredentials, "true"),
            (.accessControlExposeHeaders, Self.exposedHeaders), (.vary, "Origin"),
        ]
    }

    /// `CORS_ALLOWED_ORIGINS`: comma-separated origins, each `scheme://host[:port]` exactly as a
    /// browser sends it (no path, no `*`: credentials are allowed, which a wildcard cannot be).
    init(reading env: inout EnvironmentReader) {
        guard let text = env.optionalString("CORS_ALLOWED_ORIGINS") else { return }
        for origin in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !origin.isEmpty {
            guard Self.isOrigin(origin) else {
                env.report("CORS_ALLOWED_ORIGINS: each entry is an origin such as https://app.example.com (no path, no *), got \"\(origin)\"")
                continue
            }
            allowedOrigins.insert(origin)
        }
    }

    init(allowedOrigins: Set<String> = []) {
        self.allowedOrigins = allowedOrigins
    }

    static func isOrigin(_ text: String) -> Bool {
        guard let schemeEnd = text.range(of: "://") else { return false }
        let scheme = text[..<schemeEnd.lowerBound]
        let authority = text[schemeEnd.upperBound...]
        guard scheme == "https" || scheme == "http", !authority.isEmpty else { return false }
        return !authority.contains(where: { "/?#*@ ".contains($0) })
    }
}

/// The request bodies the gateway holds whole in memory at once, across requests
/// (`BODY_BUFFER_BYTES`): a chunked body is read whole, to hold it to its path's limit, and a small
/// one with a length, to go out with its head. Each takes its bytes from here as they arrive, not
/// before (a client that announces a body and sends little of it holds that little, not what it
/// announced: connections that announce bodies and send none would otherwise spend the budget for
/// everyone), and gives them back once its response has begun. Otherwise clients sending bodies on
/// many connections at once would make the gateway hold more than any memory it has. A small body
/// with a length that the budget has no room for when it comes streams instead; past the budget
/// while it is read, a body is refused `503` with `Retry-After` and the connection ends (the rest
/// of its body unread).
final class BodyBuffers: Sendable {
    static let standardCapacity = 64 * 1024 * 1024
    let capacity: Int
    private let held = Atomic<Int>(0)

    init(capacity: Int = BodyBuffers.standardCapacity) {
        self.capacity = capacity
    }

    /// Takes `bytes` from the budget, or nothing and false when they do not fit.
    func take(_ bytes: Int) -> Bool {
        var current = held.load(ordering: .relaxed)
        while true {
            guard current + bytes <= capacity else { return false }
            let (exchanged, original) = held.compareExchange(expected: current, desired: current + bytes, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    func give(_ bytes: Int) {
        held.subtract(bytes, ordering: .relaxed)
    }

    /// Whether `bytes` fit in the budget now (nothing is taken).
    func hasRoom(for bytes: Int) -> Bool {
        held.load(ordering: .relaxed) + bytes <= capacity
    }

    /// The room a chunked body needs in the budget, at most its limit, before it is asked for (`100
    /// Continue`) or read: a body is not told to come when the budget could hold only a byte of it.
    static let roomBeforeAsking = 64 * 1024

    static let busy = APIError(
        .serviceUnavailable, code: "busy", detail: "The gateway is holding as many request bodies as it can; try again in a moment.",
        headers: [.retryAfter: "1", .connection: "close"])
}

/// The edge's rules, in the one place every request passes, proxied or the gateway's own: CORS
/// preflights answered here, CORS headers on responses, body limits and rate limits. Hummingbird's
/// `CORSMiddleware` cannot say these rules: it answers any preflight 204 (a stranger's included,
/// where this one refuses with a problem) and names the exposed headers on preflights only, where a
/// browser reads them from the actual response.
struct EdgeMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext

    let cors: CORSPolicy
    let bodyLimits: BodyLimits
    /// The paths proxied: only their bodies are read, the gateway's own routes taking none.
    let routes: RouteTable
    var bodyBuffers = BodyBuffers()
    var limiter: EdgeRateLimiter? = nil

    /// Outside `ProblemMiddleware`, so every response, problems and 404s included, gets its CORS
    /// headers; its own refusals it turns into problems itself.
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let origin = request.headers[.origin]
        var response: Response
        let rate = limiter?.decide(path: request.uri.path, authorization: request.headers[.authorization], client: context.clientAddress)
        do {
            if let rate, !rate.allowed { throw rate.problem }
            response = try await respond(request, context: context, origin: origin, next: next)
        } catch {
            response = ProblemMiddleware<Context>.response(for: error, request: request, context: context)
        }
        for (name, value) in cors.responseHeaders(origin: origin) + (rate?.headers ?? []) { response.headers[name] = value }
        return response
    }

    private func respond(_ request: Request, context: Context, origin: String?, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let refusal = Self.framingRefusal(request) {
            // The gateway and its parser would disagree on where this request's body ends, or the
            // gateway cannot pass the body on as it came: it is not forwarded, and the connection
            // ends with the answer (RFC 9112 §3.2, §6.1, §6.3).
            var response = ProblemMiddleware<Context>.response(for: refusal, request: request, context: context)
            response.headers[.connection] = "close"
            return response
        }
        if request.method == .options, cors.isEnabled, origin != nil, request.headers[.accessControlRequestMethod] != nil {
            return try preflight(request, origin: origin)
        }
        var request = request
        // A client waiting to be asked for its body (`Expect: 100-continue`) to a path no service
        // owns gets its 404 alone: the body it was never asked for is not sent for nothing.
        if request.headers[.expect] != nil, routes.service(for: request.uri.path) == nil { return try await next(request, context) }
        if let length = request.headers[.contentLength].flatMap(Int.init) {
            let limit = bodyLimits.limit(for: request.uri.path)
            guard length <= limit else { throw BodyLimits.tooLarge(limit) }
            Self.continueIfAsked(request, context: context)
        } else if request.headers[.transferEncoding] != nil {
            let limit = bodyLimits.limit(for: request.uri.path)
            guard bodyBuffers.hasRoom(for: min(limit, BodyBuffers.roomBeforeAsking)) else { throw BodyBuffers.busy }
            var taken = 0
            defer { bodyBuffers.give(taken) }
            Self.continueIfAsked(request, context: context)
            // Chunks add up to a length no header announced: read them up to the limit, no further,
            // taking what they need from the budget as they come.
            var whole = ByteBuffer()
            for try await part in request.body {
                let size = whole.readableBytes + part.readableBytes
                guard size <= limit else { throw BodyLimits.tooLarge(limit) }
                guard bodyBuffers.take(part.readableBytes) else { throw BodyBuffers.busy }
                taken = size
                whole.writeImmutableBuffer(part)
            }
            request.body = RequestBody(buffer: whole)
            return try await next(request, context)
        }
        return try await next(request, context)
    }

    static let host = HTTPField.Name("Host")!

    /// What is wrong with a request's framing that NIO's parser lets through: a `Content-Length` it
    /// reads (any number below 2^64) that is not a length here, a second `Host` (the first is the
    /// request's authority, a second is left among the fields), a transfer coding other than
    /// `chunked`, which the gateway would strip and the service read as the body.
    static func framingRefusal(_ request: Request) -> APIError? {
        if let length = request.headers[.contentLength], Int(length).map({ $0 < 0 }) ?? true {
            return .badRequest("The request is not valid HTTP/1.1: its Content-Length is not a length.", code: "malformed_request")
        }
        if request.headers[host] != nil {
            return .badRequest("The request is not valid HTTP/1.1: it names its host twice.", code: "malformed_request")
        }
        let codings = request.headers[values: .transferEncoding].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        if !codings.isEmpty, codings != ["chunked"] {
            return APIError(.notImplemented, code: "transfer_coding_not_supported", detail: "A request body may come in chunks, with no other transfer coding.")
        }
        return nil
    }

    /// The edge's checks have passed and the body is read from here on: a client waiting to be told
    /// to send it (`Expect: 100-continue`) is told now (`ClientConnectionHandler`).
    private static func continueIfAsked(_ request: Request, context: Context) {
        guard request.headers[.expect] != nil else { return }
        context.channel.triggerUserOutboundEvent(ClientConnectionHandler.SendContinue(), promise: nil)
    }

    private func preflight(_ request: Request, origin: String?) throws -> Response {
        guard cors.allows(origin) else {
            throw APIError(.forbidden, code: "origin_not_allowed", detail: "This origin may not call the API from a browser.")
        }
        var headers = HTTPFields()
        headers[.accessControlAllowMethods] = CORSPolicy.methods
        headers[.accessControlAllowHeaders] = CORSPolicy.requestHeaders
        headers[.accessControlMaxAge] = String(CORSPolicy.maxAgeSeconds)
        return Response(status: .noContent, headers: headers)
    }
}
