import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// Calls a service under test over a pool of up to 64 connections. HummingbirdTesting's live client
/// sends one request at a time over a single connection, so tests that need requests to really
/// overlap (races, storms, rate limits) send them through this.
public enum ConcurrentClient {
    static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
        // A request waits for one of the 64 connections at most this long (AsyncHTTPClient counts
        // the wait as connecting). 200 requests in a storm, on a machine running the whole suite,
        // waited past the default 10 s.
        configuration.timeout.connect = .seconds(60)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    public struct Reply: Sendable {
        public let status: Int
        public let headers: HTTPHeaders
        public let body: ByteBuffer
        public var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(buffer: body))) as? [String: Any] ?? [:] }
    }

    public static func send(
        port: Int, _ method: String, _ path: String, headers: [(String, String)] = [], json: Any? = nil, body: ByteBuffer? = nil,
        timeout: TimeAmount = .seconds(120)
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
        request.method = .init(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys])))
        }
        // A body as it is (a multipart upload), its type among `headers`.
        if let body { request.body = .bytes(body) }
        let response = try await client.execute(request, timeout: timeout)
        return Reply(status: Int(response.status.code), headers: response.headers, body: try await response.body.collect(upTo: 1 << 20))
    }
}
