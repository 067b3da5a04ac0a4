import AsyncHTTPClient
import Foundation
import Glibc
import NIOCore
import Synchronization
import TestSupport

/// One message of a server-sent events stream as a client reads it: the fields of one block (up to
/// a blank line), or a comment.
struct SSEMessage: Sendable, Equatable {
    var id: String?
    var event: String?
    var data: String?
    var retry: String?
    var comment: String?

    /// `data` as a JSON object.
    var json: [String: Any] { data.flatMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] } ?? [:] }
}

/// A client of `GET /v1/events` for the tests, over real HTTP: it reads the stream in a task of its
/// own and keeps every message, so a test waits for what it expects (`events(count:)`, `ended`).
/// Closing it cancels the request, as a client that goes away.
final class SSEStream: Sendable {
    let status: Int
    /// Lowercased names.
    let headers: [String: String]
    private let received = Mutex<(messages: [SSEMessage], ended: Bool, endedAt: ContinuousClock.Instant?)>(([], false, nil))
    private let reader = Mutex<Task<Void, Never>?>(nil)

    /// Many streams at once, to one host: the shared clients' pools hold a few connections.
    static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(30), concurrentHTTP1ConnectionsPerHostSoftLimit: 256)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    private init(status: Int, headers: [String: String]) {
        self.status = status
        self.headers = headers
    }

    /// Opens `/v1/events` (with `query`, such as `?ticket=…`) on the gateway at `port`. A refusal
    /// (401, 429, 503) comes back as a stream with its status that has ended, its body as `data`.
    static func open(port: Int, token: String? = nil, query: String = "", lastEventID: String? = nil) async throws -> SSEStream {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/events\(query)")
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let lastEventID { request.headers.add(name: "Last-Event-ID", value: lastEventID) }
        let response = try await client.execute(request, timeout: .seconds(30))
        var headers: [String: String] = [:]
        for (name, value) in response.headers where headers[name.lowercased()] == nil { headers[name.lowercased()] = value }
        let stream = SSEStream(status: Int(response.status.code), headers: headers)
        guard response.status.code == 200 else {
            let body = try await response.body.collect(upTo: 1 << 20)
            stream.received.withLock { $0 = ([SSEMessage(data: String(buffer: body))], true, ContinuousClock.now) }
            return stream
        }
        let body = response.body
        stream.reader.withLock { reader in
            reader = Task { await stream.read(body) }
        }
        return stream
    }

    private func read(_ body: HTTPClientResponse.Body) async {
        var pending = ""
        do {
            for try await chunk in body {
                pending += String(buffer: chunk)
                while let end = pending.range(of: "\n\n") {
                    let block = String(pending[..<end.lowerBound])
                    pending = String(pending[end.upperBound...])
                    received.withLock { $0.messages.append(Self.parse(block)) }
                }
            }
        } catch {
            // A cancelled read or a broken connection: the stream is over either way.
        }
        received.withLock {
            $0.ended = true
            $0.endedAt = ContinuousClock.now
        }
    }

    static func parse(_ block: String) -> SSEMessage {
        var message = SSEMessage()
        for line in block.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix(":") {
                message.comment = line.dropFirst().trimmingCharacters(in: .whitespaces)
                continue
            }
            guard let colon = line.firstIndex(of: ":") else { continue }
            var value = line[line.index(after: colon)...]
            if value.hasPrefix(" ") { value = value.dropFirst() }
            switch line[..<colon] {
            case "id": message.id = String(value)
            case "event": message.event = String(value)
            case "data": message.data = (message.data.map { $0 + "\n" } ?? "") + value
            case "retry": message.retry = String(value)
            default: break
            }
        }
        return message
    }

    var messages: [SSEMessage] { received.withLock { $0.messages } }
    /// The messages that are events (not comments, not the `retry:` line).
    var events: [SSEMessage] { messages.filter { $0.event != nil } }
    var ended: Bool { received.withLock { $0.ended } }
    var endedAt: ContinuousClock.Instant? { received.withLock { $0.endedAt } }
    /// A refusal's problem, as JSON.
    var problem: [String: Any] { messages.first?.json ?? [:] }

    /// The first `count` events, once they have arrived.
    @discardableResult
    func events(count: Int, within limit: Duration = .seconds(20)) async throws -> [SSEMessage] {
        try await waitUntil(limit) { self.events.count >= count }
        return Array(events.prefix(count))
    }

    func waitUntilEnded(within limit: Duration = .seconds(20)) async throws {
        try await waitUntil(limit) { self.ended }
    }

    func close() {
        reader.withLock { $0?.cancel() }
    }

    deinit {
        reader.withLock { $0?.cancel() }
    }
}

/// A client of `GET /v1/events` that reads the response's head and then nothing, as an app that froze
/// with its connection open. Its receive buffer is made small, so that the gateway's side fills soon.
final class StalledClient: Sendable {
    private let fd: Int32
    /// What it read: the response's head, and perhaps the start of its body.
    let head: String

    private init(fd: Int32, head: String) {
        self.fd = fd
        self.head = head
    }

    static func open(port: Int, token: String) async throws -> StalledClient {
        try await LoopbackSocket.blocking {
            let fd = try LoopbackSocket.connect(port: port, receiveBuffer: 4_096)
            let request = "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n\r\n"
            _ = LoopbackSocket.send(fd, Array(request.utf8))
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 1_024)
            while !String(decoding: received, as: UTF8.self).contains("\r\n\r\n") {
                let count = LoopbackSocket.receive(fd, into: &buffer)
                if count <= 0 { break }
                received += buffer[0..<count]
            }
            return StalledClient(fd: fd, head: String(decoding: received, as: UTF8.self))
        }
    }

    func close() {
        Glibc.close(fd)
    }
}
