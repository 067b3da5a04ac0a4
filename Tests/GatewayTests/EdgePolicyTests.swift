import Foundation
@testable import Gateway
#if canImport(Glibc)
import Glibc
#endif
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Models
import NIOCore
import ServiceKitCore
import ServiceKitHTTP
import Synchronization
import Testing
import TestSupport

/// The edge's rules: body limits per route and CORS for listed web origins, for the requests the
/// gateway proxies and for its own routes alike.
@Suite struct EdgePolicyTests {
    static let origin = "https://app.example.com"

    /// A gateway in front of two echoing upstreams (auth's, and one for every other service), with
    /// `configure` having the last word on its configuration.
    static func withGateway(
        cors: CORSPolicy = CORSPolicy(), bodyLimits: BodyLimits = .standard, configure: (inout GatewayConfig) throws -> Void = { _ in },
        _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let auth = EchoUpstream(name: "auth")
        let social = EchoUpstream(name: "social")
        try await auth.start()
        try await social.start()
        defer { auth.stop(); social.stop() }
        var config = GatewayTests.config(everyServiceAt: social.baseURL, timeout: .seconds(5))
        config.upstreams["auth"] = auth.baseURL
        config.cors = cors
        config.bodyLimits = bodyLimits
        try configure(&config)
        try await buildApplication(config).test(.live) { client in try await body(client) }
    }

    /// Sends a request head announcing `contentLength` bytes and none of them, and reads what comes back.
    static func headOnly(port: Int, _ requestLine: String, contentLength: Int) async throws -> String {
        try await LoopbackSocket.send(
            port: port, "\(requestLine) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(contentLength)\r\n\r\n")
    }

    @Test func limitsAreByTheLongestPrefixOnWholeSegments() throws {
        let limits = BodyLimits.standard
        #expect(limits.limit(for: "/v1/profiles/me/avatar") == 5 << 20)
        #expect(limits.limit(for: "/v1/profiles/me/avatars") == 256 << 10)
        #expect(limits.limit(for: "/v1/meals") == 256 << 10)
        // A phone's photo goes on to nutrition, which has its own limit (MEAL_PHOTO_MAX_BYTES).
        #expect(limits.limit(for: "/v1/meals/analyze") == (10 << 20) + (16 << 10))
        #expect(limits.limit(for: "/v1/meals/0e5c8a38-6d4c-4f4e-9b38-1f1f4a8f0c11/photo") == (10 << 20) + (16 << 10))
        #expect(limits.limit(for: "/v1/meals/0e5c8a38-6d4c-4f4e-9b38-1f1f4a8f0c11/photo?x=1") == (10 << 20) + (16 << 10))
        #expect(limits.limit(for: "/v1/meals/0e5c8a38-6d4c-4f4e-9b38-1f1f4a8f0c11") == 256 << 10)
        #expect(limits.limit(for: "/v1/meals//photo") == 256 << 10)
        // Empty segments are skipped, as the router skips them.
        #expect(limits.limit(for: "/v1/meals//analyze") == (10 << 20) + (16 << 10))
        #expect(limits.limit(for: "//v1/meals/x//photo/") == (10 << 20) + (16 << 10))
        #expect(limits.lists("/v1/meals//analyze") && !limits.lists("/v1/meals/analyzed") && !limits.lists("/v1/meals"))
        #expect(limits.limit(for: "/v1/meals/x/photos") == 256 << 10)
        #expect(limits.limit(for: "/v1/meals/x/consume") == 256 << 10)
        var env = EnvironmentReader(["BODY_LIMITS": "/v1/meals=1KiB, /=64KiB"])
        let configured = BodyLimits(reading: &env)
        #expect(env.problems.isEmpty)
        #expect(configured.limit(for: "/v1/meals/x") == 1024 && configured.limit(for: "/v1/auth/login") == 64 << 10)
        #expect(configured.limit(for: "/v1/profiles/me/avatar") == 5 << 20)
        var bad = EnvironmentReader(["BODY_LIMITS": "meals=1KiB,/v1/x=lots"])
        _ = BodyLimits(reading: &bad)
        #expect(bad.problems.count == 2)
    }

    @Test func aBodyOverItsRoutesLimitIs413AndNeverReachesTheService() async throws {
        try await Self.withGateway { client in
            let port = try #require(client.port)
            // Only the head is sent: the response comes without the gateway waiting for a body.
            let refused = try await Self.headOnly(port: port, "POST /v1/auth/signup", contentLength: (256 << 10) + 1)
            #expect(refused.hasPrefix("HTTP/1.1 413"), "\(refused)")
            #expect(refused.contains("\"code\":\"payload_too_large\"") && refused.lowercased().contains("connection: close"), "\(refused)")
            // Up to the limit it goes on (streamed: over the pool's buffer for bodies read whole).
            let atLimit = try await client.execute(uri: "/v1/auth/signup", method: .post, body: ByteBuffer(repeating: UInt8(ascii: "a"), count: 256 << 10))
            #expect(try GatewayTests.echo(atLimit).bodyBytes == 256 << 10)
            // An avatar may be larger.
            let avatar = try await client.execute(uri: "/v1/profiles/me/avatar", method: .post, body: ByteBuffer(repeating: 0xFF, count: 2 << 20))
            #expect(try GatewayTests.echo(avatar).bodyBytes == 2 << 20)
            let hugeAvatar = try await Self.headOnly(port: port, "POST /v1/profiles/me/avatar", contentLength: (5 << 20) + 1)
            #expect(hugeAvatar.hasPrefix("HTTP/1.1 413"), "\(hugeAvatar)")
        }
    }

    /// A client that asks to be told to go on (`Expect: 100-continue`, as curl does for large
    /// uploads) is told once the gateway is about to read its body, which is then read and sent on
    /// without the expectation; one refused first (a length over its path's limit, a rate limit) gets
    /// its answer alone, and an HTTP/1.0 client no `100`.
    @Test func aClientExpectingToContinueIsToldAtOnce() async throws {
        @Sendable func exchange(port: Int, _ head: String, body: String?) throws -> (first: String, whole: String) {
            let fd = try LoopbackSocket.connect(port: port)
            defer { close(fd) }
            _ = LoopbackSocket.send(fd, Array(head.utf8))
            var buffer = [UInt8](repeating: 0, count: 65536)
            let count = LoopbackSocket.receive(fd, into: &buffer)
            let first = count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
            guard let body else { return (first, first) }
            _ = LoopbackSocket.send(fd, Array(body.utf8))
            var received = first
            while !received.hasSuffix("}") {
                let more = LoopbackSocket.receive(fd, into: &buffer)
                if more <= 0 { break }
                received += String(decoding: buffer[0..<more], as: UTF8.self)
            }
            return (first, received)
        }
        @Sendable func configure(_ config: inout GatewayConfig) {
            // Counted per address in Redis, which the suite's other gateways share: one rule of its
            // own, whose second request from this address is refused.
            config.rateLimits = RateLimitTable(rules: [RateLimitRule(prefix: "/v1/meals", max: 1, window: EdgeRateLimitTests.aWindowWithTimeLeft())])
            config.trustedProxies = try! TrustedProxies(parsing: "127.0.0.1/32")
        }
        try await Self.withGateway(bodyLimits: BodyLimits(limits: ["/": 1000]), configure: configure) { client in
            let port = try #require(client.port)
            let body = "{\"email\":\"someone@example.com\"}"
            let asking = "POST /v1/auth/signup HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
            let told = try await LoopbackSocket.blocking { try exchange(port: port, asking, body: body) }
            // The `100` comes before any body is sent: the first read holds it alone.
            #expect(told.first == "HTTP/1.1 100 Continue\r\n\r\n", "\(told.first)")
            let response = try #require(told.whole.range(of: "HTTP/1.1 200").map { String(told.whole[$0.lowerBound...]) }, "\(told.whole)")
            let echo = try JSONDecoder().decode(EchoUpstream.Echo.self, from: Data(response[response.range(of: "\r\n\r\n")!.upperBound...].utf8))
            #expect(echo.bodyBytes == body.utf8.count && echo.headers["expect"] == nil, "\(echo)")
            // Over the limit: `413` at once, no `100`.
            let tooLong = "POST /v1/auth/signup HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 1001\r\n\r\n"
            let refused = try await LoopbackSocket.blocking { try exchange(port: port, tooLong, body: nil) }
            #expect(refused.first.hasPrefix("HTTP/1.1 413"), "\(refused.first)")
            // Rate-limited: `429` alone (this address's second request under `/v1/meals`).
            let address = EdgeRateLimitTests.freshAddress(host: 8)
            let limited = "POST /v1/meals HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: \(address)\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
            let first = try await LoopbackSocket.blocking { try exchange(port: port, limited, body: body) }
            #expect(first.first == "HTTP/1.1 100 Continue\r\n\r\n" && first.whole.contains("HTTP/1.1 200"), "\(first.whole)")
            let second = try await LoopbackSocket.blocking { try exchange(port: port, limited, body: nil) }
            // The body it was never asked for cannot be read past: the connection ends with the answer.
            #expect(second.first.hasPrefix("HTTP/1.1 429") && second.first.lowercased().contains("connection: close"), "\(second.first)")
            // Read ahead behind another request, a request is told once the response before it has ended;
            // refused, it gets its answer alone and the connection ends.
            @Sendable func pipelined(_ text: String, body: String?) throws -> String {
                let fd = try LoopbackSocket.connect(port: port)
                defer { close(fd) }
                _ = LoopbackSocket.send(fd, Array(text.utf8))
                var buffer = [UInt8](repeating: 0, count: 65536)
                var received = ""
                func readUntil(_ done: (String) -> Bool) {
                    while !done(received) {
                        let count = LoopbackSocket.receive(fd, into: &buffer)
                        if count <= 0 { return }
                        received += String(decoding: buffer[0..<count], as: UTF8.self)
                    }
                }
                readUntil { $0.contains("100 Continue\r\n\r\n") || $0.contains("HTTP/1.1 429") }
                guard let body, received.contains("100 Continue") else { return received }
                _ = LoopbackSocket.send(fd, Array(body.utf8))
                readUntil { $0.components(separatedBy: "HTTP/1.1 200").count == 3 && $0.hasSuffix("}") }
                return received
            }
            let ahead = "GET /v1/auth/first HTTP/1.1\r\nHost: gw\r\n\r\n" + asking
            let toldAhead = try await LoopbackSocket.blocking { try pipelined(ahead, body: body) }
            let continued = try #require(toldAhead.range(of: "HTTP/1.1 100 Continue\r\n\r\n"), "\(toldAhead)")
            #expect(toldAhead[..<continued.lowerBound].hasPrefix("HTTP/1.1 200") && toldAhead[continued.upperBound...].hasPrefix("HTTP/1.1 200"), "\(toldAhead)")
            let crowded = EdgeRateLimitTests.freshAddress(host: 9)
            let refusedAhead = try await LoopbackSocket.blocking {
                try pipelined("GET /v1/meals HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: \(crowded)\r\n\r\n" + limited.replacingOccurrences(of: address, with: crowded), body: nil)
            }
            let refusal = try #require(refusedAhead.range(of: "HTTP/1.1 429").map { String(refusedAhead[$0.lowerBound...]) }, "\(refusedAhead)")
            #expect(refusal.lowercased().contains("connection: close") && !refusedAhead.contains("100 Continue"), "\(refusedAhead)")
            // A path no service owns: the `404` alone, its body never asked for.
            let nowhere = "POST /v1/nowhere HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
            let unowned = try await LoopbackSocket.blocking { try exchange(port: port, nowhere, body: nil) }
            #expect(unowned.first.hasPrefix("HTTP/1.1 404") && unowned.first.lowercased().contains("connection: close"), "\(unowned.first)")
            // A chunked body is read whole at the edge: it too is asked for first.
            let chunked = "POST /v1/auth/signup HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
            let chunks = "\(String(body.utf8.count, radix: 16))\r\n\(body)\r\n0\r\n\r\n"
            let toldChunked = try await LoopbackSocket.blocking { try exchange(port: port, chunked, body: chunks) }
            #expect(toldChunked.first == "HTTP/1.1 100 Continue\r\n\r\n", "\(toldChunked.first)")
            #expect(toldChunked.whole.contains("HTTP/1.1 200") && toldChunked.whole.contains("\"bodyBytes\":\(body.utf8.count)"), "\(toldChunked.whole)")
            // HTTP/1.0 knows no `100`: its body is simply read.
            let old = "POST /v1/auth/signup HTTP/1.0\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
            let answered = try await LoopbackSocket.blocking { try exchange(port: port, old, body: nil) }
            #expect(answered.first.hasPrefix("HTTP/1.1 200") && !answered.first.contains("100 Continue"), "\(answered.first)")
        }
    }

    /// Chunked bodies are read whole, each chunk taking its bytes from `BODY_BUFFER_BYTES` as it comes:
    /// clients trickling bodies hold what they have sent, not their path's limit, so a few slow
    /// uploads deny no one; bodies whose bytes fill the budget make one more chunked body `503` with
    /// `Retry-After` until they go, instead of the gateway holding without bound. A body with a
    /// length streams when the budget is spent.
    @Test func chunkedBodiesHeldAtOnceAreBounded() async throws {
        @Sendable func configure(_ config: inout GatewayConfig) {
            config.bodyLimits = BodyLimits(limits: ["/": 600_000])
            config.bodyBufferBytes = 1 << 20
            // Counted per address in Redis, which the suite's other gateways share: off, so that a
            // held body is never refused for the rate instead.
            config.rateLimits = RateLimitTable(rules: [])
        }
        @Sendable func chunked(_ bytes: Int, ended: Bool) -> String {
            "POST /v1/auth/signup HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n\(String(bytes, radix: 16))\r\n\(String(repeating: "a", count: bytes))"
                + (ended ? "\r\n0\r\n\r\n" : "")
        }
        try await Self.withGateway(configure: configure) { client in
            let port = try #require(client.port)
            // Eight uploads trickling in, each far below the budget but with a limit that eight
            // times over would be past it: the next chunked body goes.
            let trickling = HeldRequests(port: port, text: chunked(5, ended: false), count: 8)
            defer { trickling.closeAll() }
            try trickling.sendAgainWhereAnswered()
            try await Task.sleep(for: .milliseconds(200))
            let beside = try await RawHTTP.exchange(port: port, chunked(1000, ended: true), untilAnswers: 1, timeout: .seconds(5))
            #expect(beside.first?.status == 200, "\(beside.map(\.status))")
            trickling.closeAll()
            // Two bodies half-sent whose bytes leave the budget less room than the next body's chunk.
            // A probe the gateway took first may have left one of them no room (refused, answered):
            // that one is sent again, until both are held and the probe finds the budget spent.
            let held = HeldRequests(port: port, text: chunked(524_000, ended: false), count: 2)
            defer { held.closeAll() }
            try await waitUntil(.seconds(30)) {
                try held.sendAgainWhereAnswered()
                try await Task.sleep(for: .milliseconds(50))
                return try await RawHTTP.exchange(port: port, chunked(1000, ended: true), untilAnswers: 1, timeout: .seconds(5)).first?.status == 503
            }
            let refused = try await RawHTTP.exchange(port: port, chunked(1000, ended: true), untilAnswers: 1, timeout: .seconds(5))
            #expect(refused.first?.status == 503 && refused.first?.headers["retry-after"] == "1", "\(refused.map(\.status))")
            #expect(refused.first?.headers["connection"] == "close")
            let problem = String(buffer: refused.first?.body ?? ByteBuffer())
            #expect(problem.contains("\"code\":\"busy\""), "\(problem)")
            // A body with a length still goes, streamed.
            let sized = try await client.execute(uri: "/v1/auth/signup", method: .post, body: ByteBuffer(repeating: UInt8(ascii: "a"), count: 1000))
            #expect(try GatewayTests.echo(sized).bodyBytes == 1000)
            // The held bodies end: their budget is back.
            held.closeAll()
            try await waitUntil(.seconds(10)) {
                try await RawHTTP.exchange(port: port, chunked(1000, ended: true), untilAnswers: 1, timeout: .seconds(5)).first?.status == 200
            }
        }
    }

    /// A body takes the budget as its bytes come, not as its head announces them: connections that
    /// announce bodies (with a length, or in chunks) and send none hold nothing of it, and deny no
    /// one else's.
    @Test func announcedBodiesHoldNothingUntilTheyCome() async throws {
        @Sendable func configure(_ config: inout GatewayConfig) {
            config.bodyLimits = BodyLimits(limits: ["/": 600_000])
            config.bodyBufferBytes = 1 << 20
            config.rateLimits = RateLimitTable(rules: [])
        }
        try await Self.withGateway(configure: configure) { client in
            let port = try #require(client.port)
            // Twice the budget announced with lengths, and as much again in chunked heads (64 KiB of
            // room each), none of it sent.
            let sized = HeldRequests(port: port, text: "POST /v1/auth/signup HTTP/1.1\r\nHost: gw\r\nContent-Length: 262144\r\n\r\n", count: 8)
            let chunkedHeads = HeldRequests(port: port, text: "POST /v1/auth/signup HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n", count: 32)
            defer {
                sized.closeAll()
                chunkedHeads.closeAll()
            }
            try sized.sendAgainWhereAnswered()
            try chunkedHeads.sendAgainWhereAnswered()
            try await Task.sleep(for: .milliseconds(300))
            let chunked = "POST /v1/auth/signup HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n\(String(repeating: "a", count: 1000))\r\n0\r\n\r\n"
            let beside = try await RawHTTP.exchange(port: port, chunked, untilAnswers: 1, timeout: .seconds(5))
            #expect(beside.first?.status == 200, "\(beside.map(\.status))")
            let small = try await client.execute(uri: "/v1/auth/signup", method: .post, body: ByteBuffer(repeating: UInt8(ascii: "a"), count: 200_000))
            #expect(try GatewayTests.echo(small).bodyBytes == 200_000)
            // The held heads are all still waiting, answered nothing.
            try sized.sendAgainWhereAnswered()
            #expect(sized.reopened == 0 && chunkedHeads.reopened == 0)
        }
    }

    @Test func aSmallerLimitHoldsOnTheChannelHandlersPathToo() async throws {
        try await Self.withGateway(bodyLimits: BodyLimits(limits: ["/": 256 << 10, "/v1/auth/login": 100])) { client in
            let small = try await client.execute(uri: "/v1/auth/login", method: .post, body: ByteBuffer(repeating: UInt8(ascii: "a"), count: 100))
            #expect(try GatewayTests.echo(small).bodyBytes == 100)
            let over = try await Self.headOnly(port: try #require(client.port), "POST /v1/auth/login", contentLength: 101)
            #expect(over.hasPrefix("HTTP/1.1 413"), "\(over)")
        }
    }

    @Test func aListedOriginsPreflightIsAnsweredAtTheEdge() async throws {
        try await Self.withGateway(cors: CORSPolicy(allowedOrigins: [Self.origin])) { client in
            let preflight = try await client.execute(
                uri: "/v1/meals", method: .options,
                headers: [.origin: Self.origin, .accessControlRequestMethod: "POST", .accessControlRequestHeaders: "authorization, content-type"])
            #expect(preflight.status == .noContent)
            #expect(preflight.headers[.accessControlAllowOrigin] == Self.origin)
            #expect(preflight.headers[.accessControlAllowCredentials] == "true")
            #expect(preflight.headers[.accessControlAllowMethods]?.contains("POST") == true)
            #expect(preflight.headers[.accessControlAllowHeaders]?.contains("Authorization") == true)
            #expect(preflight.headers[.vary] == "Origin")

            let stranger = try await client.execute(
                uri: "/v1/meals", method: .options, headers: [.origin: "https://evil.example", .accessControlRequestMethod: "POST"])
            #expect(stranger.status == .forbidden)
            #expect(try GatewayTests.problem(stranger).code == "origin_not_allowed")
            #expect(stranger.headers[.accessControlAllowOrigin] == nil)
        }
    }

    @Test func answersNameOnlyAListedOrigin() async throws {
        try await Self.withGateway(cors: CORSPolicy(allowedOrigins: [Self.origin])) { client in
            // Proxied.
            let listed = try await client.execute(uri: "/v1/auth/me", method: .get, headers: [.origin: Self.origin])
            #expect(try GatewayTests.echo(listed).service == "auth")
            #expect(listed.headers[.accessControlAllowOrigin] == Self.origin && listed.headers[.accessControlAllowCredentials] == "true")
            #expect(listed.headers[.accessControlExposeHeaders]?.contains("X-Request-ID") == true)
            let other = try await client.execute(uri: "/v1/auth/me", method: .get, headers: [.origin: "https://evil.example"])
            #expect(other.status == .ok && other.headers[.accessControlAllowOrigin] == nil && other.headers[.vary] == "Origin")
            // The gateway's own routes and its problems (the router's path).
            let health = try await client.execute(uri: "/healthz", method: .get, headers: [.origin: Self.origin])
            #expect(health.headers[.accessControlAllowOrigin] == Self.origin)
            let missing = try await client.execute(uri: "/v1/nowhere", method: .get, headers: [.origin: Self.origin])
            #expect(missing.status == .notFound && missing.headers[.accessControlAllowOrigin] == Self.origin)
        }
    }

    @Test func withNoOriginsListedNothingChanges() async throws {
        try await Self.withGateway { client in
            let answer = try await client.execute(uri: "/v1/auth/me", method: .get, headers: [.origin: Self.origin])
            #expect(answer.headers[.accessControlAllowOrigin] == nil && answer.headers[.vary] == nil)
            // A preflight is the service's to answer, as any OPTIONS is (the echo serves no OPTIONS).
            let preflight = try await client.execute(uri: "/v1/auth/me", method: .options, headers: [.origin: Self.origin, .accessControlRequestMethod: "GET"])
            #expect(preflight.headers[.accessControlAllowOrigin] == nil)
        }
    }

    @Test func originsAreCheckedWhenRead() {
        var env = EnvironmentReader(["CORS_ALLOWED_ORIGINS": "https://app.example.com, http://localhost:3000"])
        #expect(CORSPolicy(reading: &env).allowedOrigins == ["https://app.example.com", "http://localhost:3000"] && env.problems.isEmpty)
        for wrong in ["*", "https://app.example.com/", "app.example.com", "ftp://x.example"] {
            var bad = EnvironmentReader(["CORS_ALLOWED_ORIGINS": wrong])
            _ = CORSPolicy(reading: &bad)
            #expect(bad.problems.count == 1, "\(wrong)")
        }
    }
}

/// Requests sent on connections of their own and left unfinished, each sent again on a new
/// connection once the gateway answered it (or closed it), until the gateway holds them all.
final class HeldRequests: @unchecked Sendable {
    let port: Int
    let text: String
    private var sockets: [Int32]
    /// Connections sent again because the gateway had answered (or closed) them.
    private(set) var reopened = 0

    init(port: Int, text: String, count: Int) {
        self.port = port
        self.text = text
        sockets = Array(repeating: -1, count: count)
    }

    func sendAgainWhereAnswered() throws {
        for index in sockets.indices {
            if sockets[index] >= 0 {
                var byte: UInt8 = 0
                let peeked = recv(sockets[index], &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK))
                // Nothing to read yet: still held.
                if peeked < 0, errno == EAGAIN || errno == EWOULDBLOCK { continue }
                close(sockets[index])
                reopened += 1
            }
            let fd = try LoopbackSocket.connect(port: port)
            sockets[index] = fd
            _ = LoopbackSocket.send(fd, Array(text.utf8))
        }
    }

    func closeAll() {
        for fd in sockets where fd >= 0 { close(fd) }
        sockets = sockets.map { _ in -1 }
    }
}
