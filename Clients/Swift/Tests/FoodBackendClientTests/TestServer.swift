import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// A local HTTP/1.1 server the client's tests talk to: each request is answered by the test's
/// handler, in full, or as a stream of chunks that may be cut off to drop the connection, or not at all.
final class TestServer: Sendable {
    struct Request: Sendable {
        let method: HTTPMethod
        let uri: String
        let headers: HTTPHeaders
        let body: Data

        var path: String { String(uri.split(separator: "?", maxSplits: 1)[0]) }
        var query: [String: String] {
            guard let query = URLComponents(string: uri)?.queryItems else { return [:] }
            return Dictionary(query.map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        }
        var bearer: String? {
            headers.first(name: "Authorization").flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        }
    }

    enum Reply: Sendable {
        case full(HTTPResponseStatus, [(String, String)], Data)
        /// A `text/event-stream` answer: each chunk is written after `pause`; then, once `closeAfter`
        /// opens (at once without one), the connection is closed. A close right behind the last
        /// chunk may reach a busy client with it, and the client's transport may then end the body
        /// with the error before handing over those bytes: the gate makes the test say when.
        case stream([String], pause: Duration, closeAfter: Gate? = nil)
        /// No answer: the request is read whole and the connection closed, as when an answer is lost on the way.
        case drop

        static func json(_ text: String, status: HTTPResponseStatus = .ok, headers: [(String, String)] = []) -> Reply {
            .full(status, [("Content-Type", "application/json")] + headers, Data(text.utf8))
        }

        static func problem(_ status: HTTPResponseStatus, _ code: String, extra: String = "", headers: [(String, String)] = []) -> Reply {
            let body = #"{"type":"about:blank","title":"t","status":\#(status.code),"code":"\#(code)","detail":"\#(code) happened"\#(extra)}"#
            return .full(status, [("Content-Type", "application/problem+json")] + headers, Data(body.utf8))
        }
    }

    typealias Handler = @Sendable (Request) async -> Reply

    private let channel: Channel
    let url: URL

    init(_ handler: @escaping Handler) async throws {
        // NIO's shared group: the client's pooled connections to this server may outlive the test.
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0) { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: child)
                }
            }
        channel = server.channel
        url = URL(string: "http://127.0.0.1:\(server.channel.localAddress!.port!)")!
        Task {
            try await server.executeThenClose { connections in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in connections {
                        group.addTask { try? await Self.serve(connection, handler) }
                    }
                }
            }
        }
    }

    private static func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, _ handler: Handler) async throws {
        try await connection.executeThenClose { inbound, outbound in
            var head: HTTPRequestHead?
            var body = ByteBuffer()
            for try await part in inbound {
                switch part {
                case .head(let received):
                    head = received
                    body.clear()
                case .body(var chunk):
                    body.writeBuffer(&chunk)
                case .end:
                    guard let head else { return }
                    let request = Request(method: head.method, uri: head.uri, headers: head.headers, body: Data(body.readableBytesView))
                    switch await handler(request) {
                    case .full(let status, let headers, let data):
                        var fields = HTTPHeaders(headers)
                        fields.replaceOrAdd(name: "Content-Length", value: String(data.count))
                        try await outbound.write(.head(HTTPResponseHead(version: head.version, status: status, headers: fields)))
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: data))))
                        try await outbound.write(.end(nil))
                    case .stream(let chunks, let pause, let closeAfter):
                        let fields = HTTPHeaders([("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")])
                        try await outbound.write(.head(HTTPResponseHead(version: head.version, status: .ok, headers: fields)))
                        for chunk in chunks {
                            try await outbound.write(.body(.byteBuffer(ByteBuffer(string: chunk))))
                            try await Task.sleep(for: pause)
                        }
                        await closeAfter?.wait()
                        // Closed without the chunked encoding's end: to the client, a dropped connection.
                        return
                    case .drop:
                        return
                    }
                }
            }
        }
    }

    func shutdown() async throws {
        try await channel.close()
    }
}

/// A token shaped as the server's (three base64url parts, the claims in the middle); unsigned, which
/// the client never checks.
func testToken(_ name: String, subject: String = "0d6f3b52-8a4c-4b8e-9d3e-3a1f6c2b7e10", roles: [String] = ["user"]) -> String {
    func part(_ object: [String: Any]) -> String {
        let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
    return part(["alg": "ES256"]) + "." + part(["sub": subject, "sid": name, "roles": roles, "exp": 4_102_444_800]) + ".c2ln"
}

/// A thread-safe counter and log for what the handler saw.
final class Seen: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [String: [String]] = [:]

    func add(_ key: String, _ value: String = "") {
        lock.withLock { values[key, default: []].append(value) }
    }

    func all(_ key: String) -> [String] {
        lock.withLock { values[key] ?? [] }
    }

    func count(_ key: String) -> Int { all(key).count }
}

/// Holds a test server's handler until the test opens it: an answer that comes exactly when the
/// test says, not after a sleep that a busy machine may outlast.
final class Gate: Sendable {
    private let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    init() {
        (stream, continuation) = AsyncStream.makeStream(of: Void.self)
    }

    func open() { continuation.finish() }

    /// Returns once the gate is open. One waiter at a time.
    func wait() async { for await _ in stream {} }
}
