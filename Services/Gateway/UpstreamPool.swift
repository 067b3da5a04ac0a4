import Foundation
import Hummingbird
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import ServiceKit
import Synchronization

/// Why an exchange with an upstream failed; `ProxyMiddleware.problem(for:)` turns each into 503, 502
/// or 504.
enum UpstreamError: Error, Equatable, CustomStringConvertible {
    /// No connection could be made (refused, unreachable, no connection within the connect timeout).
    case unreachable(String)
    /// The connection was found closed before anything was written on it: safe to send elsewhere.
    case notSent
    /// No complete response before the deadline; `stage` says how far the exchange got, for the log.
    case timedOut(stage: String)
    /// The connection ended before the response's head arrived.
    case closedBeforeResponse
    /// The connection ended, or sent something that is not HTTP (or a response framed so that a
    /// proxy could be fooled), before the response ended.
    case brokenResponse(String)

    var description: String {
        switch self {
        case .unreachable(let why): "upstream unreachable: \(why)"
        case .timedOut(let stage): "upstream timed out (\(stage))"
        case .notSent: "upstream connection closed before the request was sent"
        case .closedBeforeResponse: "upstream closed the connection before responding"
        case .brokenResponse(let why): "upstream response broken: \(why)"
        }
    }
}

/// An upstream's response. Bodies of known, small length are read whole (almost every API response:
/// one write to the client instead of a task switch per chunk); others stream with backpressure.
struct UpstreamResponse: Sendable {
    /// As NIO's HTTP/1 decoder read it: `ProxyMiddleware` passes most of its headers on.
    var head: HTTPResponseHead
    /// The body as it is, without framing (a chunked one's chunk lines are gone).
    var body: Body
    /// The upstream answered before the client's streamed body was all sent (a refusal on its
    /// head): the rest of it is still on its way to the gateway.
    var clientBodyLeftUnread = false

    enum Body: Sendable {
        case complete(ByteBuffer)
        case stream(UpstreamBodyStream)
    }
}

/// What goes after a request's head: nothing, a small body the gateway has read whole (sent with the
/// head in one write, and sendable again), or the client's body streamed as it arrives.
enum OutgoingBody: Sendable {
    case none
    case whole(ByteBuffer)
    case stream(RequestBody)

    var wholeBytes: ByteBuffer? {
        if case .whole(let bytes) = self { return bytes }
        return nil
    }

    /// Whether the same bytes can be sent again on another connection.
    var replayable: Bool {
        if case .stream = self { return false }
        return true
    }
}

/// How an exchange hands over its response (or why there is none): called once, on the connection's
/// event loop.
typealias UpstreamResponseHandler = @Sendable (Result<UpstreamResponse, any Error>) -> Void

typealias UpstreamBodyStream = NIOThrowingAsyncSequenceProducer<
    ByteBuffer, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, UpstreamExchangeHandler.Demand
>

/// One upstream service's keep-alive HTTP/1.1 connections. A request takes an idle connection (one on
/// its own event loop if there is one) or opens a new one, and gives it back when the response has been
/// read whole on a connection both sides keep open. There is no cap on connections in use: each
/// carries one request that a client of the gateway is waiting for, so the clients bound them, as
/// with any reverse proxy; at most `maxIdle` are kept open between requests.
///
/// It stands where AsyncHTTPClient stood: that client's request preparation, URL parsing, pool state
/// machine and body streams were about half of the gateway's CPU per proxied request.
final class UpstreamPool: Sendable {
    let host: String
    let port: Int
    private let hostHeader: String
    private let tls: NIOSSLContext?
    private let group: any EventLoopGroup
    private let connectTimeout: TimeAmount
    private let maxIdle: Int
    private let idle = Mutex(Idle())

    private struct Idle {
        var connections: [UpstreamConnection] = []
        var closed = false
    }

    /// `baseURL` is `http://host[:port]` or `https://host[:port]` (no path: `GatewayConfig` checks).
    init(
        baseURL: String, connectTimeout: Duration, maxIdle: Int = 128,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws {
        guard let url = URL(string: baseURL), let scheme = url.scheme, let host = url.host, ["http", "https"].contains(scheme) else {
            throw UpstreamError.unreachable("not an http(s) URL: \(baseURL)")
        }
        self.host = host
        self.port = url.port ?? (scheme == "https" ? 443 : 80)
        self.hostHeader = url.port.map { "\(host):\($0)" } ?? host
        self.tls = scheme == "https" ? try NIOSSLContext(configuration: .makeClientConfiguration()) : nil
        self.group = group
        self.connectTimeout = TimeAmount(connectTimeout)
        self.maxIdle = maxIdle
    }

    /// Methods that a server may receive twice to the same effect (RFC 9110 §9.2.2).
    static let idempotent: [HTTPMethod] = [.GET, .HEAD, .OPTIONS, .PUT, .DELETE]

    /// Sends `head` and `body` and returns the response's head once it arrives. A request goes once
    /// more on a new connection when the pooled one it took turned out closed before anything was
    /// written, or, for an idempotent request whose body is not a stream, when the connection broke
    /// before any response (the upstream closed it while it sat idle; it may also have acted on the
    /// request, which such a request allows).
    func execute(_ head: HTTPRequestHead, body: OutgoingBody, deadline: NIODeadline) async throws -> UpstreamResponse {
        let loop = group.any()
        guard case .stream(let stream) = body else {
            let response = loop.makePromise(of: UpstreamResponse.self)
            send(head, body: body, deadline: deadline, on: loop) { response.completeWith($0) }
            return try await response.futureResult.get()
        }
        let connection: UpstreamConnection
        if let pooled = idleConnection(on: loop) { connection = pooled } else { connection = try await newConnection(deadline: deadline, on: loop).get() }
        do {
            return try await connection.stream(head, body: stream, deadline: deadline)
        } catch UpstreamError.notSent {
            return try await newConnection(deadline: deadline, on: loop).get().stream(head, body: stream, deadline: deadline)
        }
    }

    /// The same exchange for a request whose body is in hand (none, or read whole), without leaving
    /// the event loop. `respond` is called once, on the connection's loop, which is `loop` whenever
    /// the pool has or can open one there.
    func send(_ head: HTTPRequestHead, body: OutgoingBody, deadline: NIODeadline, on loop: any EventLoop, respond: @escaping UpstreamResponseHandler) {
        precondition(body.replayable, "a streamed body goes through execute")
        let retriable = Self.idempotent.contains(head.method)
        let pooled = idleConnection(on: loop)
        let reused = pooled != nil
        let firstResponse: UpstreamResponseHandler = { result in
            guard case .failure(let error) = result else { return respond(result) }
            let sendAgain =
                switch error as? UpstreamError {
                case .notSent?: true
                case .closedBeforeResponse?: reused && retriable
                default: false
                }
            guard sendAgain else { return respond(result) }
            self.sendOnNewConnection(head, body: body, deadline: deadline, on: loop, respond: respond)
        }
        if let pooled {
            pooled.send(head, body: body, deadline: deadline, respond: firstResponse)
        } else {
            sendOnNewConnection(head, body: body, deadline: deadline, on: loop, respond: firstResponse)
        }
    }

    private func sendOnNewConnection(
        _ head: HTTPRequestHead, body: OutgoingBody, deadline: NIODeadline, on loop: any EventLoop, respond: @escaping UpstreamResponseHandler
    ) {
        newConnection(deadline: deadline, on: loop).whenComplete { result in
            switch result {
            case .success(let connection): connection.send(head, body: body, deadline: deadline, respond: respond)
            case .failure(let error): respond(.failure(error))
            }
        }
    }

    /// Closes the idle connections; connections in use close when their exchange ends.
    func shutdown() {
        let connections = idle.withLock { idle in
            idle.closed = true
            defer { idle.connections.removeAll() }
            return idle.connections
        }
        for connection in connections { connection.close() }
    }

    /// An idle connection that is still open, one on `loop` if there is one.
    private func idleConnection(on loop: any EventLoop) -> UpstreamConnection? {
        idle.withLock { idle in
            while let index = idle.connections.lastIndex(where: { $0.channel.eventLoop === loop }) ?? idle.connections.indices.last {
                let candidate = idle.connections.remove(at: index)
                if candidate.channel.isActive { return candidate }
            }
            return nil
        }
    }

    /// The gateway frames each request's body itself (`ProxyMiddleware.Framing`): NIO's encoder
    /// writes the head as it is given and chunks a body only when the head says so.
    private static let encoderConfiguration = {
        var configuration = HTTPRequestEncoder.Configuration()
        configuration.automaticallySetFramingHeaders = false
        return configuration
    }()

    private func newConnection(deadline: NIODeadline, on loop: any EventLoop) -> EventLoopFuture<UpstreamConnection> {
        let timeout = min(connectTimeout, deadline - .now())
        guard timeout > .zero else { return loop.makeFailedFuture(UpstreamError.timedOut(stage: "no time left to connect")) }
        let handler = UpstreamExchangeHandler(host: hostHeader)
        let tls = self.tls
        let serverHostname = host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : host
        return ClientBootstrap(group: loop)
            .connectTimeout(timeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { [weak self] channel in
                channel.eventLoop.makeCompletedFuture {
                    // Set here, on the channel's loop before it is active, like all the handler's
                    // state; the handler drops it when the channel closes (`handlerRemoved`).
                    handler.onReusable = { [weak self] in self?.release(UpstreamConnection(channel: channel, handler: handler)) }
                    channel.closeFuture.whenComplete { [weak self] _ in
                        self?.idle.withLock { idle in idle.connections.removeAll { $0.channel === channel } }
                    }
                    let pipeline = channel.pipeline.syncOperations
                    if let tls {
                        try pipeline.addHandler(NIOSSLClientHandler(context: tls, serverHostname: serverHostname))
                    }
                    // NIO's HTTP/1 codec, kept and fuzzed by its maintainers: a slip in reading what an
                    // upstream sends is where a proxy passes a smuggled response on. The decoder sees
                    // each request head go out, so it knows a HEAD's response has no body; interim
                    // responses (100 Continue) it drops.
                    try pipeline.addHandler(HTTPRequestEncoder(configuration: Self.encoderConfiguration))
                    try pipeline.addHandler(
                        ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes, informationalResponseStrategy: .drop)))
                    try pipeline.addHandler(handler)
                }
            }
            .connect(host: host, port: port)
            .map { UpstreamConnection(channel: $0, handler: handler) }
            .flatMapErrorThrowing { throw UpstreamError.unreachable("\($0)") }
    }

    private func release(_ connection: UpstreamConnection) {
        let kept = idle.withLock { idle in
            guard !idle.closed && idle.connections.count < maxIdle else { return false }
            idle.connections.append(connection)
            return true
        }
        if !kept { connection.close() }
    }
}

/// A connection to an upstream and the handler that runs its exchanges, one at a time.
final class UpstreamConnection: Sendable {
    let channel: any Channel
    let handler: UpstreamExchangeHandler

    init(channel: any Channel, handler: UpstreamExchangeHandler) {
        self.channel = channel
        self.handler = handler
    }

    /// An exchange whose body is in hand: head, body and end in one flush, on the connection's loop.
    /// The response is `notSent` if the connection was found closed.
    func send(_ head: HTTPRequestHead, body: OutgoingBody, deadline: NIODeadline, respond: @escaping UpstreamResponseHandler) {
        let loop = channel.eventLoop
        let handler = self.handler
        if loop.inEventLoop {
            _ = handler.start(head, body: body, respond: respond, deadline: deadline)
        } else {
            loop.execute { _ = handler.start(head, body: body, respond: respond, deadline: deadline) }
        }
    }

    /// An exchange whose body streams from the client, chunk by chunk.
    func stream(_ head: HTTPRequestHead, body stream: RequestBody, deadline: NIODeadline) async throws -> UpstreamResponse {
        let response = channel.eventLoop.makePromise(of: UpstreamResponse.self)
        let handler = self.handler
        let answered = AnsweredFlag()
        let respond: UpstreamResponseHandler = { result in
            if case .success = result { answered.raise() }
            response.completeWith(result)
        }
        // Known taken before the client's body is read, so that a closed connection leaves the body
        // for a new one.
        guard try await channel.eventLoop.submit({ handler.start(head, body: .stream(stream), respond: respond, deadline: deadline) }).get() else {
            throw UpstreamError.notSent
        }
        // The client's body goes up while the response is awaited, not before: an upstream that
        // answers early (a refusal on the head) is answered to the client at once, not once the
        // client sends again, which it may not do while it waits for that very answer.
        let loop = channel.eventLoop
        return try await withThrowingTaskGroup(of: StreamedExchange.self) { exchange in
            exchange.addTask {
                do {
                    // Each chunk is written once the previous one reached the socket: a slow upstream
                    // slows the client's upload instead of filling the gateway's memory. If the exchange
                    // already ended (an early response, a timeout, a broken connection) the writes fail
                    // and the response says what happened.
                    for try await chunk in stream where chunk.readableBytes > 0 {
                        try await Self.written(on: loop) { handler.writeBody(chunk, on: loop) }
                    }
                } catch {
                    // Stopped because the response came: the exchange goes on without the rest.
                    // Otherwise (the client's body broke, a write failed, the request's own task was
                    // cancelled) the exchange cannot go on.
                    if !answered.isRaised { handler.failFromOutside(error, on: loop) }
                    return .clientBody(read: false)
                }
                do {
                    try await loop.flatSubmit { handler.endRequest(on: loop) }.get()
                } catch {
                    handler.failFromOutside(error, on: loop)
                }
                return .clientBody(read: true)
            }
            exchange.addTask { .response(try await response.futureResult.get()) }
            var clientBodyRead = false
            while let outcome = try await exchange.next() {
                switch outcome {
                case .clientBody(let read):
                    clientBodyRead = read
                case .response(var answer):
                    // Answered with the client's body still coming: its reading stops here, ending the
                    // request body's stream (the connection ends with the response, what the client
                    // still sends dropped), so that the response goes out now. A failure (thrown)
                    // stops it as well.
                    exchange.cancelAll()
                    while let outcome = try await exchange.next() {
                        if case .clientBody(let read) = outcome { clientBodyRead = read }
                    }
                    answer.clientBodyLeftUnread = !clientBodyRead
                    return answer
                }
            }
            preconditionFailure("the response's task returns or throws")
        }
    }

    /// Waits for `write` (made on `loop`) to reach the socket, or for the task's cancellation (the
    /// response came), whichever is first: an upstream that answered without reading the body need
    /// never take the write, and the response would wait for it until the exchange's deadline.
    private static func written(on loop: any EventLoop, _ write: @escaping @Sendable () -> EventLoopFuture<Void>) async throws {
        let done = loop.makePromise(of: Void.self)
        loop.execute { write().cascade(to: done) }
        try await withTaskCancellationHandler {
            try await done.futureResult.get()
        } onCancel: {
            done.fail(CancellationError())
        }
    }

    /// Raised when a streamed exchange's response comes (on the connection's loop, before the response
    /// is handed on): the body's reading stopped after it is not a failure of the exchange.
    private final class AnsweredFlag: Sendable {
        private let raised = Atomic(false)
        func raise() { raised.store(true, ordering: .releasing) }
        var isRaised: Bool { raised.load(ordering: .acquiring) }
    }

    /// What each of a streamed exchange's two tasks ends with.
    private enum StreamedExchange: Sendable {
        /// The client's body was sent whole, or its reading (or writing) stopped.
        case clientBody(read: Bool)
        case response(UpstreamResponse)
    }

    func close() {
        channel.close(promise: nil)
    }
}

/// Runs one exchange at a time on its connection (all of its state lives on the channel's event
/// loop): writes the request through NIO's encoder, takes the response as NIO's decoder reads it
/// into an `UpstreamResponse`, enforces the deadline, holds reads while a streamed body's reader is
/// behind, and hands the connection back for reuse only when the request was sent whole, the
/// response read whole, and both sides keep it open.
final class UpstreamExchangeHandler: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = HTTPClientRequestPart
    typealias OutboundOut = HTTPClientRequestPart

    static let bufferedBodyLimit = 256 * 1024

    private enum State {
        case idle
        /// Waiting for the head of the response `respond` is for.
        case awaitingHead
        /// Reading a small body whole, into `body`.
        case buffering
        case streaming(UpstreamBodyStream.Source)
        case closed
    }

    private var state = State.idle
    /// Who waits for the current exchange's response, until it has it. Kept beside the state, not
    /// in it, with the head and body being read, so that no part copies them in and out of the
    /// state's cases.
    private var respond: UpstreamResponseHandler?
    private var head: HTTPResponseHead?
    private var body = ByteBuffer()
    private var context: ChannelHandlerContext?
    /// The current request is a HEAD: its response has no body whatever its head says.
    private var requestIsHEAD = false
    /// The current exchange's deadline: its start's plus `allowance`, moved on by each part of a
    /// streamed body, either way, so that an upload or a response as slow as its client is not
    /// cut while the upstream keeps up (the client's own pace is `ClientConnectionHandler`'s).
    private var deadline = NIODeadline.distantFuture
    private var allowance = TimeAmount.zero
    /// One timer per connection, not one per exchange: it fires at the earliest deadline it was armed
    /// for and then re-arms for the exchange in flight, if any. An exchange takes milliseconds and
    /// its deadline is seconds away, so most exchanges start and end without touching the event
    /// loop's timers.
    private var timer: (at: NIODeadline, task: Scheduled<Void>)?
    /// Tells the armed timer from one cancelled too late to stop its run (the loop may have taken it
    /// already), which must not forget the armed one.
    private var timerGeneration = 0
    /// The request's last bytes reached the socket (known for a streamed body; see `requestWritten`).
    private var requestSent = false
    /// The current request went out in one flush: sent once the channel holds nothing unwritten.
    private var sentWhole = false
    /// The upstream's `Host`, sent with every request.
    private let host: String
    static let routedMethods: [HTTPMethod] = [.GET, .HEAD, .POST, .PUT, .PATCH, .DELETE, .OPTIONS]
    private var keepAlive = true
    /// A read the channel asked for while the stream's reader had enough: done when it wants more.
    private var heldRead = false
    private var readerWantsMore = true
    /// Counts exchanges, so that a finished stream's late word cannot reach the next exchange.
    private var exchange = 0
    /// Called (on the event loop) when the connection may carry another exchange.
    var onReusable: (@Sendable () -> Void)?

    init(host: String) {
        self.host = host
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        onReusable = nil
        timer?.task.cancel()
        timer = nil
    }

    /// Begins an exchange; false (and the response failed with `notSent`) if the connection was
    /// found closed, before anything was written.
    func start(_ head: HTTPRequestHead, body: OutgoingBody, respond: @escaping UpstreamResponseHandler, deadline: NIODeadline) -> Bool {
        guard let context, case .idle = state, context.channel.isActive else {
            respond(.failure(UpstreamError.notSent))
            return false
        }
        state = .awaitingHead
        self.respond = respond
        requestIsHEAD = head.method == .HEAD
        exchange += 1
        requestSent = false
        // An exchange in a method no route serves (TRACE, QUERY …) ends its connection: the upstream
        // responds 405 at once, and what it then makes of a body it never wanted is not worth
        // finding out on a connection the next request would share.
        keepAlive = head.isKeepAlive && Self.routedMethods.contains(head.method)
        heldRead = false
        readerWantsMore = true
        self.deadline = deadline
        allowance = deadline - context.eventLoop.now
        armTimer(for: deadline, on: context.eventLoop)
        var head = head
        head.headers.replaceOrAdd(name: "Host", value: host)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        switch body {
        case .stream:
            sentWhole = false
        case .whole(let whole):
            context.write(wrapOutboundOut(.body(.byteBuffer(whole))), promise: nil)
            context.write(wrapOutboundOut(.end(nil)), promise: nil)
            sentWhole = true
        case .none:
            context.write(wrapOutboundOut(.end(nil)), promise: nil)
            sentWhole = true
        }
        context.flush()
        return true
    }

    /// Writes a part of a streamed body (NIO's encoder frames it as its head said); completes once
    /// it reached the socket.
    func writeBody(_ chunk: ByteBuffer, on loop: any EventLoop) -> EventLoopFuture<Void> {
        guard let context else { return loop.makeFailedFuture(UpstreamError.closedBeforeResponse) }
        progressed(on: loop)
        return context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(chunk))))
    }

    /// Ends a streamed request; the exchange may be over already if the upstream responded early.
    func endRequest(on loop: any EventLoop) -> EventLoopFuture<Void> {
        guard let context else { return loop.makeFailedFuture(UpstreamError.closedBeforeResponse) }
        let written = loop.makePromise(of: Void.self)
        progressed(on: loop)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: written)
        written.futureResult.whenSuccess { [self] in requestSent = true }
        return written.futureResult
    }

    /// Whether the whole request has reached the socket. A request written in one go is, once the
    /// channel holds nothing unwritten: asking costs less than a promise per request.
    private var requestWritten: Bool {
        if requestSent { return true }
        guard sentWhole, let context else { return false }
        return (try? context.channel.syncOptions?.getOption(ChannelOptions.bufferedWritableBytes)) == 0
    }

    /// The request body could not be read from the client (or written): the exchange cannot go on.
    func failFromOutside(_ error: any Error, on loop: any EventLoop) {
        loop.execute { [self] in
            if case .idle = state { return }
            fail(error as? UpstreamError ?? .brokenResponse("request body: \(error)"))
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            guard case .awaitingHead = state, let respond else { return fail(.brokenResponse("a response nobody asked for")) }
            if let refusal = Self.refusal(of: head) { return fail(.brokenResponse(refusal)) }
            let bodiless = requestIsHEAD || head.status.code == 204 || head.status.code == 304
            let length = head.headers.first(name: "content-length").flatMap { Int($0) }
            let chunked = head.headers.contains(name: "transfer-encoding")
            // A body framed by the connection's end leaves nothing to reuse; so does a transfer coding
            // in an HTTP/1.0 response, which is not to be trusted to frame it (RFC 9112 §6.1).
            let framed = bodiless || length != nil || (chunked && head.version.minor > 0)
            keepAlive = keepAlive && head.isKeepAlive && framed
            if bodiless || (length ?? .max) <= Self.bufferedBodyLimit {
                state = .buffering
                self.head = head
                body = ByteBuffer()
            } else {
                let made = UpstreamBodyStream.makeSequence(
                    backPressureStrategy: .init(lowWatermark: 2, highWatermark: 8), finishOnDeinit: false,
                    delegate: Demand(handler: self, loop: context.eventLoop, exchange: exchange))
                state = .streaming(made.source)
                self.respond = nil
                respond(.success(UpstreamResponse(head: head, body: .stream(made.sequence))))
            }
        case .body(var part):
            switch state {
            case .buffering:
                // Nearly always the whole body in one read: kept as the slice it is, not copied.
                if body.readableBytes == 0 { body = part } else { body.writeBuffer(&part) }
            case .streaming(let source):
                progressed(on: context.eventLoop)
                if source.yield(part) == .stopProducing { readerWantsMore = false }
            default:
                fail(.brokenResponse("a body without a head"))
            }
        case .end:
            // Trailers are dropped: nothing the gateway passes on reads them.
            switch state {
            case .buffering:
                guard let head, let respond else { return fail(.brokenResponse("an end without a head")) }
                let body = self.body
                self.head = nil
                self.respond = nil
                self.body = ByteBuffer()
                finishExchange()
                respond(.success(UpstreamResponse(head: head, body: .complete(body))))
            case .streaming(let source):
                finishExchange()
                source.finish()
            default:
                fail(.brokenResponse("an end without a head"))
            }
        }
    }

    /// Why a response NIO's decoder read is not passed on, if it is not. The decoder refuses a
    /// Content-Length beside a Transfer-Encoding and a repeated Content-Length; the body goes to the
    /// client unframed and without its transfer coding's name, so a coding other than chunked (gzip,
    /// say) would reach it unnamed; a protocol switch was never asked for.
    static func refusal(of head: HTTPResponseHead) -> String? {
        if head.status.code == 101 { return "a protocol switch nobody asked for" }
        let lengths = head.headers[canonicalForm: "content-length"]
        if lengths.count > 1 || lengths.contains(where: { $0.isEmpty || !$0.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } }) {
            return "a Content-Length that is not one number"
        }
        let codings = head.headers[canonicalForm: "transfer-encoding"]
        if !codings.isEmpty {
            if !lengths.isEmpty { return "a Transfer-Encoding beside a Content-Length" }
            guard codings.count == 1, codings[0].lowercased() == "chunked" else { return "a transfer coding other than chunked" }
        }
        return nil
    }

    func read(context: ChannelHandlerContext) {
        if case .streaming = state, !readerWantsMore {
            heldRead = true
        } else {
            context.read()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        // NIO's decoder has ended a body framed by the connection's end, or reported a body cut short.
        switch state {
        case .awaitingHead: fail(.closedBeforeResponse)
        case .buffering, .streaming: fail(.brokenResponse("the connection closed"))
        case .idle, .closed: state = .closed
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch state {
        // What the decoder refused is the upstream's doing, not a connection that went away.
        case .awaitingHead where !(error is HTTPParserError || error is NIOHTTPDecoderError): fail(.closedBeforeResponse)
        default: fail(.brokenResponse("\(error)"))
        }
    }

    /// The stream's reader wants more (after it had enough) or has gone away.
    struct Demand: NIOAsyncSequenceProducerDelegate {
        let handler: UpstreamExchangeHandler
        let loop: any EventLoop
        let exchange: Int

        func produceMore() {
            loop.execute { [handler, exchange] in
                guard handler.exchange == exchange else { return }
                handler.readerWantsMore = true
                handler.progressed(on: loop)
                if handler.heldRead, let context = handler.context {
                    handler.heldRead = false
                    context.read()
                }
            }
        }

        func didTerminate() {
            // The client stopped reading (it went away): the rest of this response has nowhere to go.
            loop.execute { [handler, exchange] in
                guard handler.exchange == exchange, case .streaming = handler.state else { return }
                handler.fail(.brokenResponse("the client went away"))
            }
        }
    }

    /// A part of a streamed body went one way or the other (or its reader asked for more): the
    /// exchange has its whole allowance again from now. The armed timer, firing at the earlier
    /// deadline, re-arms itself for this one.
    fileprivate func progressed(on loop: any EventLoop) {
        let moved = loop.now + allowance
        if moved > deadline { deadline = moved }
    }

    /// Makes the timer fire by `deadline`; a timer that fires earlier re-arms itself then.
    private func armTimer(for deadline: NIODeadline, on loop: any EventLoop) {
        if let timer, timer.at <= deadline { return }
        timer?.task.cancel()
        timerGeneration &+= 1
        let generation = timerGeneration
        timer = (deadline, loop.scheduleTask(deadline: deadline) { [self] in timerFired(generation, on: loop) })
    }

    /// Ends the exchange in flight if its deadline has passed, or waits for it.
    private func timerFired(_ generation: Int, on loop: any EventLoop) {
        guard generation == timerGeneration else { return }
        timer = nil
        switch state {
        case .idle, .closed: return
        case .awaitingHead, .buffering, .streaming: break
        }
        // The loop's clock, which the timer ran on.
        if loop.now >= deadline {
            fail(.timedOut(stage: stage))
        } else {
            armTimer(for: deadline, on: loop)
        }
    }

    /// How far the current exchange got: what a timeout reports.
    private var stage: String {
        let progress =
            switch state {
            case .awaitingHead: requestWritten ? "request sent, no response" : "request not yet sent whole"
            case .buffering: "response head received, body incomplete"
            case .streaming: "response streaming"
            case .idle, .closed: "exchange over"
            }
        return "\(progress); exchange \(exchange) on this connection"
    }

    private func finishExchange() {
        state = .idle
        if keepAlive && requestWritten, let onReusable {
            onReusable()
        } else {
            context?.close(promise: nil)
        }
    }

    /// Ends the exchange with `error` and closes the connection: what is left on it is unknown.
    private func fail(_ error: UpstreamError) {
        let previous = state
        let respond = self.respond
        state = .closed
        self.respond = nil
        head = nil
        body = ByteBuffer()
        switch previous {
        case .awaitingHead, .buffering: respond?(.failure(error))
        case .streaming(let source): source.finish(error)
        case .idle, .closed: break
        }
        context?.close(promise: nil)
    }
}
