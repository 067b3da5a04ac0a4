import Foundation
import HTTPTypes
import Hummingbird
import Models
import NIOCore
import NIOHTTP1
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase

/// Turns every thrown error into `application/problem+json` with a stable `code`. Unexpected errors
/// become a 500 that says nothing about internals; the error itself is logged with the request id.
public struct ProblemMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    public init() {}

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            return Self.response(for: error, request: request, context: context)
        }
    }

    public static func response(for error: any Error, request: Request, context: Context) -> Response {
        let requestID = context.requestID
        switch error {
        case let error as APIError:
            return Problem(
                status: Int(error.status.code), code: error.code, title: error.status.reasonPhrase, detail: error.detail, errors: error.errors, requestID: requestID,
                extensions: error.extensions
            )
            .response(status: error.status, headers: error.headers)
        case let error as HTTPError:
            let status = error.status
            var headers = error.headers
            headers[.contentType] = nil
            let detail = error.body ?? Self.defaultDetail(status: status, request: request)
            return Problem(status: Int(status.code), code: StatusCode.code(for: status), title: status.reasonPhrase, detail: detail, requestID: requestID)
                .response(status: status, headers: headers)
        case let error as HTTPParserError:
            // The body's framing broke after its head was read (a chunk size that is no number): the
            // client's request is not HTTP, as a bad head is, which the channel answers 400 itself.
            return Self.response(for: APIError.badRequest("The request is not valid HTTP/1.1: \(error).", code: "malformed_request"), request: request, context: context)
        case is NIOTooManyBytesError:
            return Self.response(for: APIError(.contentTooLarge, code: "payload_too_large", detail: "The request body is too large."), request: request, context: context)
        case let error as DecodingError:
            return Self.response(for: APIError.decoding(error), request: request, context: context)
        case let error as PSQLError where ["23505", "40001", "40P01"].contains(error.serverInfo?[.sqlState] ?? ""):
            // Two requests raced for the same unique row (or a serialization conflict, or a deadlock
            // PostgreSQL broke by ending one of them): the loser is told to retry rather than seeing a 500.
            context.logger.info("request lost a race", metadata: ["sql_state": "\(error.serverInfo?[.sqlState] ?? "")", "path": "\(RequestLog.redacted(request.uri.path))"])
            return Self.response(for: APIError.conflict("A concurrent request changed the same data; try again.", code: "conflict"), request: request, context: context)
        case let error as PSQLError where ["22021", "22P05"].contains(error.serverInfo?[.sqlState] ?? ""):
            // A NUL (or a byte sequence that is not UTF-8) in a value the client sent, which PostgreSQL
            // text (22021) or jsonb (22P05) cannot hold: the client's input, wherever it came from (a
            // field a route does not check itself, a query parameter), so a 400 and not a 500. Logged,
            // should it ever be the server's own text.
            context.logger.info("text PostgreSQL cannot hold", metadata: ["sql_state": "\(error.serverInfo?[.sqlState] ?? "")", "path": "\(RequestLog.redacted(request.uri.path))"])
            return Self.response(for: APIError(.badRequest, code: "invalid_text", detail: "Text may not contain NUL characters (\\u0000)."), request: request, context: context)
        case is CancellationError:
            // The request's task was cancelled: the process is stopping, or the connection closed.
            context.logger.debug("request cancelled", metadata: ["path": "\(RequestLog.redacted(request.uri.path))"])
            return Self.response(for: APIError(.serviceUnavailable, code: "service_unavailable", detail: "The request was cancelled; try again."), request: request, context: context)
        case _ where isDatabaseUnavailable(error):
            context.logger.warning("database unavailable", metadata: ["error": "\(String(reflecting: error))", "path": "\(RequestLog.redacted(request.uri.path))"])
            return Self.response(for: APIError.databaseUnavailable, request: request, context: context)
        default:
            context.logger.error("unhandled error", metadata: ["error": "\(String(reflecting: error))", "path": "\(RequestLog.redacted(request.uri.path))"])
            return Problem(
                status: 500, code: "internal_error", title: "Internal Server Error",
                detail: "Something went wrong on our side. Quote the request id if you report it.", requestID: requestID
            )
            .response(status: .internalServerError)
        }
    }

    static func defaultDetail(status: HTTPResponse.Status, request: Request) -> String {
        switch status.code {
        case 404: "No route for \(request.method.rawValue) \(request.uri.path)."
        case 405: "\(request.method.rawValue) is not allowed on \(request.uri.path)."
        case 413: "The request body is too large."
        default: status.reasonPhrase
        }
    }
}

extension APIError {
    /// A JSON body that does not fit the request type, with the offending field named.
    static func decoding(_ error: DecodingError) -> APIError {
        func path(_ codingPath: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            let keys = codingPath + (last.map { [$0] } ?? [])
            let joined = keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.reduce("") { partial, key in
                key.hasPrefix("[") ? partial + key : (partial.isEmpty ? key : partial + "." + key)
            }
            return joined.isEmpty ? "body" : joined
        }
        switch error {
        case .keyNotFound(let key, let context):
            let field = path(context.codingPath, key)
            return .validation([.init(field: field, message: "is required")])
        case .valueNotFound(_, let context):
            return .validation([.init(field: path(context.codingPath), message: "must not be null")])
        case .typeMismatch(let type, let context):
            return .validation([.init(field: path(context.codingPath), message: "must be \(Self.jsonTypeName(type))")])
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty {
                return APIError(.badRequest, code: "malformed_json", detail: "The request body is not valid JSON.")
            }
            return .validation([.init(field: path(context.codingPath), message: context.debugDescription)])
        @unknown default:
            return APIError(.badRequest, code: "malformed_json", detail: "The request body could not be read.")
        }
    }

    static func jsonTypeName(_ type: Any.Type) -> String {
        let name = String(describing: type)
        switch name {
        case "String": return "a string"
        case "Int", "Int64", "Int32", "Double", "Float", "Decimal": return "a number"
        case "Bool": return "true or false"
        case "UUID": return "a UUID"
        case "Date": return "an RFC 3339 date-time"
        default:
            if name.hasPrefix("Array") || name.hasPrefix("[") { return "an array" }
            if name.hasPrefix("Dictionary") { return "an object" }
            return "a valid \(name)"
        }
    }
}
