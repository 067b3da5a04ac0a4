import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import PostgresNIO

/// Someone a test calls a service as: what goes in `Authorization: Bearer`.
public protocol BearerHolder: Sendable {
    var token: String { get }
}

/// What every service's test environment shares: HTTP calls through the real router, calls that
/// really overlap, and plain SQL against the service's own schema.
public protocol ServiceHarness: Sendable {
    var client: any TestClientProtocol { get }
    var database: TestDatabase { get }
    /// The service whose schema `count` and `execute` run in.
    var serviceName: String { get }
}

extension ServiceHarness {
    @discardableResult
    public func call(
        _ method: HTTPRequest.Method, _ path: String, as user: (any BearerHolder)? = nil, json: Any? = nil, raw: ByteBuffer? = nil, headers extra: HTTPFields = [:]
    ) async throws -> APIReply {
        var headers = extra
        if let user { headers[.authorization] = "Bearer \(user.token)" }
        var body = raw
        if let json {
            body = ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]))
            headers[.contentType] = "application/json"
        }
        let response = try await client.execute(uri: path, method: method, headers: headers, body: body)
        return APIReply(status: response.status, headers: response.headers, body: response.body)
    }

    /// A call that really overlaps with others (see `ConcurrentClient`).
    public func concurrentCall(
        _ method: HTTPRequest.Method, _ path: String, as user: (any BearerHolder)?, json: Any? = nil, headers extra: [(String, String)] = []
    ) async throws -> HTTPResponse.Status {
        HTTPResponse.Status(code: try await concurrentReply(method, path, as: user, json: json, headers: extra).status)
    }

    public func concurrentReply(
        _ method: HTTPRequest.Method, _ path: String, as user: (any BearerHolder)?, json: Any? = nil, headers extra: [(String, String)] = []
    ) async throws -> ConcurrentClient.Reply {
        var headers = extra
        if let user { headers.append(("Authorization", "Bearer \(user.token)")) }
        return try await ConcurrentClient.send(port: client.port!, method.rawValue, path, headers: headers, json: json)
    }

    /// The first column of the first row of `sql`, an integer (a `count(*)`).
    public func count(_ sql: String) async throws -> Int {
        try await withClient(database.config(for: serviceName)) { client in
            var result = 0
            for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).decode(Int64.self) { result = Int(value) }
            return result
        }
    }

    public func execute(_ sql: String) async throws {
        try await withClient(database.config(for: serviceName)) { client in
            _ = try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).collect()
        }
    }
}
