import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1
import ServiceKit

/// Forwards requests whose path a route claims to that service over the service's `UpstreamPool`,
/// streaming both bodies. Requests no route claims go on to the gateway's own router (health,
/// metrics, then 404).
struct ProxyMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext

    let table: RouteTable
    let pools: [String: UpstreamPool]
    let timeout: Duration

    /// Headers that describe one connection, not the message (RFC 9110 §7.6.1), and are never forwarded.
    /// `expect` too: the gateway reads the client's body itself, so a `100 Continue` is its own to send.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
        "te", "trailer", "transfer-encoding", "upgrade", "host", "expect",
    ]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let service = table.service(for: request.uri.path), let pool = pools[service] else {
            return try await next(request, context)
        }
        var target = request.uri.path
        if let query = request.uri.query { target += "?" + query }
        // Swift's HTTP types keep the `Host` header as the request's authority.
        var incoming = HTTPHeaders(request.headers)
        if let authority = request.head.authority { incoming.add(name: "Host", value: authority) }
        var head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: request.method.rawValue), uri: target,
                                   headers: Self.forwardHeaders(incoming, client: context.clientAddress, requestID: context.requestID))
        // A request has a body when it says how long it is or that it comes in chunks (RFC 9112 §6.3).
        // A small one is read whole and sent with the head; a large one, or one of unknown length
        // (which goes on in chunks), streams.
        var body = OutgoingBody.none
        if let length = request.headers[.contentLength].flatMap(Int.init) {
            if length > UpstreamExchangeHandler.bufferedBodyLimit {
                body = .stream(request.body)
            } else if length > 0 {
                do {
                    body = .whole(try await request.body.collect(upTo: length))
                } catch {
                    throw APIError.badRequest("The request body ended before its Content-Length.")
                }
            }
        } else if request.headers[.transferEncoding] != nil {
            head.headers.add(name: "Transfer-Encoding", value: "chunked")
            body = .stream(request.body)
        }
        let response: UpstreamResponse
        do {
            response = try await pool.execute(head, body: body, deadline: .now() + TimeAmount(timeout))
        } catch {
            throw Self.problem(for: error, service: service, logger: context.logger)
        }
        let status = HTTPResponse.Status(code: Int(response.head.status.code), reasonPhrase: response.head.status.reasonPhrase)
        let headers = HTTPFields(Self.answerHeaders(response.head.headers), splitCookie: false)
        switch response.body {
        case .complete(let body):
            return Response(status: status, headers: headers, body: .init(byteBuffer: body))
        case .stream(let stream):
            return Response(status: status, headers: headers, body: ResponseBody(asyncSequence: stream))
        }
    }

    /// Headers a client may not set: the gateway is the edge, so what a client claims about addresses
    /// is not passed on (a trusted load balancer's address is, as the one X-Forwarded-For).
    static let gatewaySets: Set<String> = ["x-request-id", "x-forwarded-for", "x-forwarded-host", "x-real-ip"]

    /// What an upstream receives: the client's headers less the hop-by-hop ones, those the
    /// `Connection` header names and those only the gateway sets; then the client's address, the
    /// `Host` it asked for and the request id.
    static func forwardHeaders(_ incoming: HTTPHeaders, client: String, requestID: String) -> HTTPHeaders {
        var headers = incoming
        remove(from: &headers) { hopByHop.contains($0) || gatewaySets.contains($0) }
        // Also forgets the keep-alive NIO's decoder noted for the client's connection (an HTTP/1.0
        // client's would close each upstream connection after one exchange).
        headers.remove(name: "connection")
        headers.add(name: "X-Forwarded-For", value: client)
        if let host = incoming.first(name: "host") { headers.add(name: "X-Forwarded-Host", value: host) }
        headers.add(name: "X-Request-ID", value: requestID)
        return headers
    }

    /// What the client receives of an upstream's headers: all but the hop-by-hop ones.
    static func answerHeaders(_ incoming: HTTPHeaders) -> HTTPHeaders {
        var headers = incoming
        remove(from: &headers) { hopByHop.contains($0) }
        return headers
    }

    /// Removes the headers whose lowercased name `drop` picks, and those the `Connection` header
    /// names. Most messages have none, and are left as they are rather than copied header by header.
    private static func remove(from headers: inout HTTPHeaders, where drop: (String) -> Bool) {
        let named = connectionTokens(headers)
        var doomed: [String] = []
        for (name, _) in headers {
            let lower = name.lowercased()
            if drop(lower) || named.contains(lower), !doomed.contains(lower) { doomed.append(lower) }
        }
        for name in doomed { headers.remove(name: name) }
    }

    static func connectionTokens(_ headers: HTTPHeaders) -> Set<String> {
        guard headers.contains(name: "connection") else { return [] }
        return Set(headers["connection"].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
    }

    /// An upstream that cannot be reached is 503, one that broke the exchange 502, one too slow 504.
    static func problem(for error: any Error, service: String, logger: Logger) -> APIError {
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
