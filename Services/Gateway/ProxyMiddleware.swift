import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceKit

/// Forwards requests whose path a route claims to that service, streaming both bodies. Requests no
/// route claims go on to the gateway's own router (health, metrics, then 404).
struct ProxyMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext

    let table: RouteTable
    let upstreams: [String: String]
    let httpClient: HTTPClient
    let timeout: Duration

    static let bufferedBodyLimit = 256 * 1024

    /// Headers that describe one connection, not the message (RFC 9110 §7.6.1), and are never forwarded.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
        "te", "trailer", "transfer-encoding", "upgrade", "host",
    ]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let service = table.service(for: request.uri.path), let base = upstreams[service] else {
            return try await next(request, context)
        }
        var target = request.uri.path
        if let query = request.uri.query { target += "?" + query }
        var upstream = HTTPClientRequest(url: base + target)
        upstream.method = HTTPMethod(rawValue: request.method.rawValue)
        upstream.headers = Self.forwardHeaders(request.headers, authority: request.head.authority, context: context)
        if request.method != .get && request.method != .head {
            let length = request.headers[.contentLength].flatMap { Int64($0) }
            upstream.body = .stream(request.body, length: length.map { .known($0) } ?? .unknown)
        }
        let response: HTTPClientResponse
        do {
            response = try await httpClient.execute(upstream, deadline: .now() + TimeAmount(timeout))
        } catch {
            throw Self.problem(for: error, service: service, logger: context.logger)
        }
        var headers = HTTPFields()
        let dropped = Self.connectionTokens(response.headers)
        for (name, value) in response.headers where !Self.hopByHop.contains(name.lowercased()) && !dropped.contains(name.lowercased()) {
            if let field = HTTPField.Name(name) { headers.append(HTTPField(name: field, value: value)) }
        }
        let status = HTTPResponse.Status(code: Int(response.status.code), reasonPhrase: response.status.reasonPhrase)
        // A small body of known length (almost every API answer) is read whole and written in one
        // go: streaming it costs a task switch per chunk, which at thousands of requests a second
        // was a large share of the gateway's CPU. Large or open-ended bodies still stream.
        if let length = response.headers.first(name: "content-length").flatMap(Int.init), length <= Self.bufferedBodyLimit {
            let body: ByteBuffer
            do {
                body = try await response.body.collect(upTo: length)
            } catch {
                throw Self.problem(for: error, service: service, logger: context.logger)
            }
            return Response(status: status, headers: headers, body: .init(byteBuffer: body))
        }
        return Response(status: status, headers: headers, body: ResponseBody(asyncSequence: response.body))
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
        Set(headers["connection"].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
    }

    /// An upstream that cannot be reached is 503, one that broke the exchange 502, one too slow 504.
    static func problem(for error: any Error, service: String, logger: Logger) -> APIError {
        logger.warning("upstream failed", metadata: ["upstream": "\(service)", "error": "\(error)"])
        let unreachable = APIError(.serviceUnavailable, code: "upstream_unavailable", detail: "The \(service) service is not reachable right now.", headers: [.retryAfter: "1"])
        switch error {
        case let error as HTTPClientError:
            if [.deadlineExceeded, .readTimeout, .writeTimeout].contains(error) {
                return APIError(.gatewayTimeout, code: "upstream_timeout", detail: "The \(service) service did not answer in time.")
            }
            if [.connectTimeout, .getConnectionFromPoolTimeout].contains(error) { return unreachable }
        case is NIOConnectionError:
            return unreachable
        case let error as IOError where [ECONNREFUSED, ECONNRESET, EHOSTUNREACH, ENETUNREACH].contains(error.errnoCode):
            return unreachable
        default:
            break
        }
        return APIError(.badGateway, code: "bad_gateway", detail: "The \(service) service broke off the exchange.")
    }
}
