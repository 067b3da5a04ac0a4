import Foundation
import HTTPTypes
import Hummingbird
import Models
import ServiceKitCore
import ServiceKitDatabase

/// An error a handler throws on purpose: its status, stable `code` and message reach the client as
/// `application/problem+json`.
public struct APIError: Error, Sendable, CustomStringConvertible {
    public var status: HTTPResponse.Status
    public var code: String
    public var detail: String
    public var errors: [Problem.FieldError]?
    public var headers: HTTPFields
    /// Members written beside the standard ones (RFC 9457 extensions).
    package var extensions: [String: JSONValue]
    /// Whether this error is the request's answer once given, as a success is: thrown under an
    /// `Idempotency-Key`, it is kept and sent again to a retry instead of running the route again.
    /// For an outcome that cost something to reach (a model asked) and would come out the same.
    public var answersRetries = false

    public init(
        _ status: HTTPResponse.Status, code: String, detail: String, errors: [Problem.FieldError]? = nil, headers: HTTPFields = [:],
        extensions: [String: JSONValue] = [:]
    ) {
        self.status = status
        self.code = code
        self.detail = detail
        self.errors = errors
        self.headers = headers
        self.extensions = extensions
    }

    public var description: String { "\(status.code) \(code): \(detail)" }

    public static func badRequest(_ detail: String, code: String = "bad_request") -> APIError { .init(.badRequest, code: code, detail: detail) }
    public static func validation(_ errors: [Problem.FieldError], detail: String? = nil) -> APIError {
        .init(.badRequest, code: "validation_failed", detail: detail ?? errors.map { "\($0.field): \($0.message)" }.joined(separator: "; "), errors: errors)
    }
    public static func unauthorized(_ detail: String, code: String = "unauthorized") -> APIError {
        .init(.unauthorized, code: code, detail: detail, headers: [.wwwAuthenticate: "Bearer"])
    }
    public static func forbidden(_ detail: String = "You do not have permission to do this.") -> APIError { .init(.forbidden, code: "forbidden", detail: detail) }
    public static func notFound(_ detail: String = "Not found.", code: String = "not_found") -> APIError { .init(.notFound, code: code, detail: detail) }
    public static func conflict(_ detail: String, code: String) -> APIError { .init(.conflict, code: code, detail: detail) }
    public static func tooManyRequests(_ detail: String, code: String = "rate_limited", retryAfterSeconds: Int) -> APIError {
        .init(.tooManyRequests, code: code, detail: detail, headers: [.retryAfter: String(max(1, retryAfterSeconds))])
    }
    /// A limit counted in Redis: `ttlMilliseconds` is the counter's `PTTL` (rounded up to whole
    /// seconds for `Retry-After`, and said in the detail).
    public static func tooManyRequests(_ detail: String, code: String = "rate_limited", ttlMilliseconds: Int?) -> APIError {
        let seconds = max(1, ((ttlMilliseconds ?? 1_000) + 999) / 1_000)
        return tooManyRequests("\(detail) Try again in \(seconds) s.", code: code, retryAfterSeconds: seconds)
    }
    /// PostgreSQL is out of reach: the server's trouble, for the client to retry shortly.
    package static let databaseUnavailable = APIError(
        .serviceUnavailable, code: "service_unavailable",
        detail: "The service cannot reach its database right now; try again shortly.",
        headers: [.retryAfter: "5"])
}

extension Problem {
    /// The problem+json response for a status with the request id attached.
    func response(status: HTTPResponse.Status, headers extra: HTTPFields = [:]) -> Response {
        let (headers, body) = encoded(headers: extra)
        return Response(status: status, headers: headers, body: .init(byteBuffer: body))
    }

    /// The body and its headers, for code that writes a response without Hummingbird's `Response`.
    package func encoded(headers extra: HTTPFields = [:]) -> (HTTPFields, ByteBuffer) {
        var headers = extra
        headers[.contentType] = Problem.mediaType
        let body = (try? Data(APIJSON.encode(self, keeping: requestID))) ?? Data("{}".utf8)
        return (headers, ByteBuffer(bytes: body))
    }
}

/// Stable codes for statuses that the framework itself raises.
enum StatusCode {
    static func code(for status: HTTPResponse.Status) -> String {
        switch status.code {
        case 400: "bad_request"
        case 401: "unauthorized"
        case 403: "forbidden"
        case 404: "not_found"
        case 405: "method_not_allowed"
        case 408: "request_timeout"
        case 409: "conflict"
        case 413: "payload_too_large"
        case 415: "unsupported_media_type"
        case 422: "unprocessable"
        case 429: "rate_limited"
        case 502: "bad_gateway"
        case 503: "service_unavailable"
        case 504: "gateway_timeout"
        case 500..<600: "internal_error"
        default: "error"
        }
    }
}
