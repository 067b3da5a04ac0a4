import Foundation
@testable import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Models
import NIOCore
import NIOPosix
import ServiceKitHTTP
import Synchronization
import Testing
import TestSupport

/// An upstream that responses each request, once its head is in, with the bytes it was given, then
/// closes the connection: a response of any shape, well formed or not.
final class ScriptedUpstream: Sendable {
    let channel: any Channel

    init(response: String) async throws {
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Script(response: response)) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    var baseURL: String { "http://127.0.0.1:\(channel.localAddress?.port ?? 0)" }

    func stop() async { try? await channel.close() }

    final class Script: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let response: String
        private var received = ""
        private var answered = false

        init(response: String) { self.response = response }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            received += String(buffer: unwrapInboundIn(data))
            guard !answered, received.contains("\r\n\r\n") else { return }
            answered = true
            context.writeAndFlush(NIOAny(ByteBuffer(string: response))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }
}

/// What a client gets through the gateway of the responses an upstream sends, as NIO's HTTP/1
/// decoder reads them: framing a proxy could be fooled by is a 502, never passed on.
@Suite struct UpstreamResponseTests {
    /// The client's response to `GET` (or `method`) `/v1/meals`, which the scripted upstream answers.
    static func through(_ response: String, method: String = "GET", bodiless: Bool = false) async throws -> RawHTTP.Answer? {
        let upstream = try await ScriptedUpstream(response: response)
        let answers = Mutex<[RawHTTP.Answer]>([])
        try await GatewayTests.withGateway(upstreamOverrides: ["nutrition": upstream.baseURL]) { client in
            let port = try #require(client.port)
            let received = try await RawHTTP.exchange(
                port: port, "\(method) /v1/meals HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n", bodiless: bodiless ? [0] : [])
            answers.withLock { $0 = received }
        }
        await upstream.stop()
        return answers.withLock { $0.first }
    }

    /// Response smuggling: a length beside chunks, two lengths (equal or not), a transfer coding
    /// other than chunked, a protocol switch nobody asked for, a body cut short, a head that is not one.
    @Test(arguments: [
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!",
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
        "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok",
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 2\r\n\r\nok",
        "HTTP/2 200 OK\r\n\r\n",
    ])
    func framingAProxyCouldBeFooledByIs502(response: String) async throws {
        let answer = try #require(try await Self.through(response), "\(response)")
        #expect(answer.status == 502, "\(response)")
        #expect(answer.headers["content-type"] == Problem.mediaType, "\(response)")
    }

    /// Interim responses are not the response; a 204, a 304 and the response to a HEAD have no body
    /// whatever their head says; a body framed by the connection's end arrives whole.
    @Test func interimResponsesAreSkippedAndSomeResponsesHaveNoBody() async throws {
        let interim = try #require(try await Self.through("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
        #expect(interim.status == 200 && String(buffer: interim.body) == "ok")
        for status in ["204 No Content", "304 Not Modified"] {
            let empty = try #require(try await Self.through("HTTP/1.1 \(status)\r\nContent-Length: 9\r\n\r\n"))
            #expect("\(empty.status)" == status.prefix(3) && empty.body.readableBytes == 0, "\(status)")
            #expect(empty.headers["transfer-encoding"] == nil, "\(status)")
        }
        let head = try #require(try await Self.through("HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", method: "HEAD", bodiless: true))
        #expect(head.status == 200 && head.headers["content-length"] == "50")
        let untilClose = try #require(try await Self.through("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"))
        #expect(untilClose.status == 200 && String(buffer: untilClose.body) == "all of it")
    }

    /// What the client gets of an upstream's header lines: not the hop-by-hop ones, nor those its
    /// `Connection` names, nor the upstream's `Server`.
    @Test func anUpstreamsHeadersForTheClient() async throws {
        let answer = try #require(
            try await Self.through(
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nconnection: x-private\r\nX-Private: 1\r\n"
                    + "Keep-Alive: timeout=5\r\nSERVER: upstream\r\nX-Public: 2\r\n\r\nok"))
        #expect(answer.status == 200 && String(buffer: answer.body) == "ok")
        #expect(answer.headers["x-public"] == "2" && answer.headers["content-length"] == "2")
        #expect(answer.headers["x-private"] == nil && answer.headers["keep-alive"] == nil)
        #expect(answer.headers["server"] == "gateway")
    }

    /// The gateway's own refusals of a proxied request go out as the router's responses do, with the
    /// same headers: a rate limit's 429 carries a `Date` like any other response.
    @Test func theGatewaysOwnRefusalsCarryWhatEveryResponseDoes() async throws {
        @Sendable func oneRequestAWindow(_ config: inout GatewayConfig) {
            config.rateLimits = RateLimitTable(rules: [RateLimitRule(prefix: "/", max: 1, window: EdgeRateLimitTests.aWindowWithTimeLeft())])
        }
        try await EdgePolicyTests.withGateway(configure: oneRequestAWindow) { client in
            let first = try await client.execute(uri: "/v1/auth/kept/a", method: .get)
            #expect(first.status == .ok && first.headers[.date] != nil)
            let refused = try await client.execute(uri: "/v1/auth/kept/b", method: .get)
            #expect(refused.status == .tooManyRequests)
            #expect(refused.headers[.date] != nil && refused.headers[.server] == "gateway")
            let own = try await client.execute(uri: "/healthz", method: .get)
            #expect(own.status == .tooManyRequests && own.headers[.date] != nil)
        }
    }
}
