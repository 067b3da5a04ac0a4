import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import ServiceKit

/// Forwards requests whose path a route claims to that service over the service's `UpstreamPool`,
/// streaming both bodies: every proxied request takes this one path, inside the router's middleware
/// (request ids, the log line and metrics, the edge's rules in `EdgeMiddleware`, problem+json), as
/// the gateway's own routes do. Requests no route claims go on to the gateway's own router (health,
/// the API document, the live stream, then 404).
struct ProxyMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext

    let table: RouteTable
    let pools: [String: UpstreamPool]
    let timeout: Duration
    var bodyBuffers = BodyBuffers()
    /// Sessions heard to have ended, and the verifier whose tokens name them: a request bearing the
    /// token of one goes on marked `X-Session-Ended`, which the services' `TokenMiddleware` takes for
    /// the token's refusal, rather than taking the token until it expires.
    var endedSessions: (sessions: EndedSessions, verifier: TokenVerifier)?

    static let bodyEndedEarly = APIError.badRequest("The request body ended before its Content-Length.")

    /// Headers that describe one connection, not the message (RFC 9110 §7.6.1), and are never forwarded.
    /// `expect` too: the gateway reads the client's body itself, so a `100 Continue` is its own to send.
    static let hopByHop: [String] = [
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
        "te", "trailer", "transfer-encoding", "upgrade", "host", "expect",
    ]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let service = table.service(for: request.uri.path), let pool = pools[service] else {
            return try await next(request, context)
        }
        // The service knows whether the route needs a caller: one that does answers `session_revoked`,
        // one that does not (sign-in, refresh, a mailed link) ignores the token, as it always does.
        var sessionEnded = false
        if let (sessions, verifier) = endedSessions, let authorization = request.headers[.authorization] {
            sessionEnded = sessions.endsToken(of: authorization, verifier: verifier)
        }
        var target = request.uri.path
        if let query = request.uri.query { target += "?" + query }
        // Swift's HTTP types keep the `Host` header as the request's authority.
        var incoming = HTTPHeaders(request.headers)
        if let authority = request.head.authority { incoming.add(name: "Host", value: authority) }
        // A request has a body when it says how long it is or that it comes in chunks (RFC 9112 §6.3).
        // A small one is read whole and sent with the head; a large one, or one of unknown length
        // (which goes on in chunks), streams.
        var body = OutgoingBody.none
        var framing = Framing.none
        var buffered = 0
        defer { if buffered > 0 { bodyBuffers.give(buffered) } }
        if let length = request.headers[.contentLength].flatMap(Int.init) {
            framing = .length(length)
            if length > UpstreamExchangeHandler.bufferedBodyLimit || (length > 0 && !bodyBuffers.hasRoom(for: length)) {
                // Large, or the gateway holds as many bodies as it may: it streams.
                body = .stream(request.body)
            } else if length > 0 {
                // Its bytes are taken from the budget as they come, not as announced.
                var whole = ByteBuffer()
                do {
                    for try await part in request.body {
                        guard whole.readableBytes + part.readableBytes <= length else { throw Self.bodyEndedEarly }
                        guard bodyBuffers.take(part.readableBytes) else { throw BodyBuffers.busy }
                        buffered += part.readableBytes
                        whole.writeImmutableBuffer(part)
                    }
                } catch let refusal as APIError {
                    throw refusal
                } catch {
                    throw Self.bodyEndedEarly
                }
                guard whole.readableBytes == length else { throw Self.bodyEndedEarly }
                body = .whole(whole)
                framing = .length(whole.readableBytes)
            }
        } else if request.headers[.transferEncoding] != nil {
            framing = .chunked
            body = .stream(request.body)
        }
        let head = HTTPRequestHead(
            version: .http1_1, method: HTTPMethod(rawValue: request.method.rawValue), uri: target,
            headers: Self.forwardHeaders(incoming, framing: framing, client: context.clientAddress, requestID: context.requestID, sessionEnded: sessionEnded))
        let response: UpstreamResponse
        do {
            response = try await pool.execute(head, body: body, deadline: .now() + TimeAmount(timeout))
        } catch {
            var problem = Self.problem(for: error, service: service, logger: context.logger)
            // A streamed body may have megabytes to go when the exchange fails (a timeout, a broken
            // upstream): as after an early answer, the connection ends rather than read them.
            if case .stream = body { problem.headers[.connection] = "close" }
            throw problem
        }
        let status = HTTPResponse.Status(code: Int(response.head.status.code), reasonPhrase: response.head.status.reasonPhrase)
        var headers = Self.headersForClient(response.head.headers)
        // The rest of the client's body would be read only to be thrown away (a refused upload may
        // have megabytes to go): the connection ends with the response instead, which says so.
        if response.clientBodyLeftUnread { headers[.connection] = "close" }
        switch response.body {
        case .complete(let body):
            return Response(status: status, headers: headers, body: .init(byteBuffer: body))
        case .stream(let stream):
            return Response(status: status, headers: headers, body: ResponseBody(asyncSequence: stream))
        }
    }

    /// The headers of an upstream's response that go on to the client: all but the hop-by-hop ones
    /// and those its `Connection` header names. Hummingbird's encoder frames the response for the
    /// client (chunks for a body without a length, none for the response to a HEAD); the `Server`,
    /// `Date` and `X-Request-ID` the gateway sets replace the upstream's.
    static func headersForClient(_ headers: HTTPHeaders) -> HTTPFields {
        let named = connectionTokens(headers)
        var fields = HTTPFields()
        fields.reserveCapacity(headers.count)
        for (name, value) in headers {
            if let known = KnownHeader.of(name), known.hopByHop { continue }
            if named.contains(headerName: name) { continue }
            guard let fieldName = HTTPField.Name(name) else { continue }
            fields.append(HTTPField(name: fieldName, value: value))
        }
        return fields
    }

    /// Headers a client may not set: the gateway is the edge, so what a client claims about addresses
    /// is not passed on (a trusted load balancer's address is, as the one X-Forwarded-For).
    static let gatewaySets: [String] = ["x-request-id", "x-forwarded-for", "x-forwarded-host", "x-real-ip", "x-session-ended"]

    /// How the body the gateway sends upstream is framed: by the gateway, from the body it actually
    /// sends, never by passing the client's `Content-Length` on. A client's `Connection:
    /// content-length` once had that header dropped while its body still went out: on a GET or
    /// DELETE, which NIO sends without framing of its own, the upstream read the body as the next
    /// request on a pooled connection, completed by the next client's headers (its token among them).
    enum Framing: Equatable {
        /// No body and no framing header (a GET, as the client sent it).
        case none
        case length(Int)
        case chunked
    }

    /// What an upstream receives: the client's headers less the hop-by-hop ones, those the
    /// `Connection` header names, those only the gateway sets and the client's framing; then the
    /// gateway's framing, the client's address, the `Host` it asked for, the request id, and
    /// `X-Session-Ended` when the bearer token's session has ended (`EndedSessions`). Built in
    /// one pass over the client's headers: copying them and removing names one by one (each a scan,
    /// with a lowercased copy and a set lookup per header) was a tenth of the gateway's instructions
    /// per request.
    static func forwardHeaders(_ incoming: HTTPHeaders, framing: Framing, client: String, requestID: String, sessionEnded: Bool = false) -> HTTPHeaders {
        let named = connectionTokens(incoming)
        var kept: [(String, String)] = []
        kept.reserveCapacity(incoming.count + 4)
        var host: String?
        for (name, value) in incoming {
            if let known = KnownHeader.of(name) {
                if known.name == "host", host == nil { host = value }
                if known.hopByHop || known.gatewaySets || known.name == "content-length" { continue }
            }
            if named.contains(headerName: name) { continue }
            kept.append((name, value))
        }
        switch framing {
        case .none: break
        case .length(let length): kept.append(("Content-Length", String(length)))
        case .chunked: kept.append(("Transfer-Encoding", "chunked"))
        }
        kept.append(("X-Forwarded-For", client))
        if let host { kept.append(("X-Forwarded-Host", host)) }
        kept.append(("X-Request-ID", requestID))
        if sessionEnded { kept.append(("X-Session-Ended", "1")) }
        // A new header block: it does not carry NIO's keep-alive reading of the client's connection
        // (an HTTP/1.0 client's would close each upstream connection after one exchange).
        return HTTPHeaders(kept)
    }

    /// The names the `Connection` header lists (nearly always none), compared as header names are.
    static func connectionTokens(_ headers: HTTPHeaders) -> [String] {
        var tokens: [String] = []
        for (name, value) in headers where name.isHeaderName("connection") {
            for token in value.split(separator: ",") {
                let trimmed = token.trimmingCharacters(in: .whitespaces)
                if !trimmed.isEmpty { tokens.append(trimmed) }
            }
        }
        return tokens
    }

    /// An upstream that cannot be reached is 503, one that broke the exchange 502, one too slow 504.
    static func problem(for error: any Error, service: String, logger: Logger) -> APIError {
        // The gateway's own refusal (a rate limit), not the upstream's failure.
        if let refused = error as? APIError { return refused }
        logger.warning("upstream failed", metadata: ["upstream": "\(service)", "error": "\(error)"])
        switch error as? UpstreamError {
        case .unreachable:
            return APIError(.serviceUnavailable, code: "upstream_unavailable", detail: "The \(service) service is not reachable right now.", headers: [.retryAfter: "1"])
        case .timedOut:
            return APIError(.gatewayTimeout, code: "upstream_timeout", detail: "The \(service) service did not answer in time.")
        default:
            return APIError(.badGateway, code: "bad_gateway", detail: "The \(service) service broke off the exchange.")
        }
    }
}
