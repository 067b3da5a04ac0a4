import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
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
        var head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: request.method.rawValue), uri: target,
                                   headers: Self.forwardHeaders(request.headers, authority: request.head.authority, context: context))
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
        var headers = HTTPFields()
        let dropped = Self.connectionTokens(response.head.headers)
        for (name, value) in response.head.headers {
            guard let field = HTTPField.Name(name) else { continue }
            // `canonicalName` is the name in lowercase, worked out once by HTTPField.Name.
            if Self.hopByHop.contains(field.canonicalName) || dropped.contains(field.canonicalName) { continue }
            headers.append(HTTPField(name: field, value: value))
        }
        let status = HTTPResponse.Status(code: Int(response.head.status.code), reasonPhrase: response.head.status.reasonPhrase)
        switch response.body {
        case .complete(let body):
            return Response(status: status, headers: headers, body: .init(byteBuffer: body))
        case .stream(let stream):
            return Response(status: status, headers: headers, body: ResponseBody(asyncSequence: stream))
        }
    }

    static func forwardHeaders(_ incoming: HTTPFields, authority: String?, context: Context) -> HTTPHeaders {
        var headers = HTTPHeaders()
        var dropped: Set<String> = []
        for value in incoming[values: .connection] {
            for token in value.split(separator: ",") { dropped.insert(token.trimmingCharacters(in: .whitespaces).lowercased()) }
        }
        for field in incoming {
            let name = field.name.canonicalName
            // The gateway is the edge: what a client claims about addresses is not passed on (the
            // address from a trusted load balancer's header is, as the one X-Forwarded-For).
            if hopByHop.contains(name) || dropped.contains(name) || ["x-request-id", "x-forwarded-for", "x-forwarded-host", "x-real-ip"].contains(name) { continue }
            headers.add(name: field.name.rawName, value: field.value)
        }
        headers.replaceOrAdd(name: "X-Forwarded-For", value: context.clientAddress)
        if let host = authority { headers.replaceOrAdd(name: "X-Forwarded-Host", value: host) }
        headers.replaceOrAdd(name: "X-Request-ID", value: context.requestID)
        return headers
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
