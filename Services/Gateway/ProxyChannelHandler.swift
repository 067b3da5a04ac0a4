import Foundation
import HTTPTypes
import HummingbirdCore
import Logging
import Models
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens

/// What every client connection's `ProxyChannelHandler` shares.
struct GatewayProxy: Sendable {
    let table: RouteTable
    let pools: [String: UpstreamPool]
    let timeout: Duration
    let metrics: HTTPMetrics
    let trustedProxies: TrustedProxies
    let logger: Logger
    /// How long a client may take to send what the gateway waits for (`ProxyChannelHandler`).
    let clientTimeout: Duration
    /// `proxy:<service>` per service, the metrics' route label, made once.
    let routeLabels: [String: String]
    /// The edge's rules, as `EdgeMiddleware` applies them on the router's path.
    let bodyLimits: BodyLimits
    let cors: CORSPolicy
    let limiter: EdgeRateLimiter?

    init(
        table: RouteTable, pools: [String: UpstreamPool], timeout: Duration, metrics: HTTPMetrics, trustedProxies: TrustedProxies, logger: Logger,
        clientTimeout: Duration, bodyLimits: BodyLimits = .standard, cors: CORSPolicy = CORSPolicy(), limiter: EdgeRateLimiter? = nil
    ) {
        self.limiter = limiter
        self.bodyLimits = bodyLimits
        self.cors = cors
        self.table = table
        self.pools = pools
        self.timeout = timeout
        self.clientTimeout = clientTimeout
        self.metrics = metrics
        self.trustedProxies = trustedProxies
        self.logger = logger
        self.routeLabels = Dictionary(uniqueKeysWithValues: pools.keys.map { ($0, "proxy:" + $0) })
    }

    /// The metrics' route label of a request to `path` that a route claims, on either path.
    func routeLabel(for path: some StringProtocol) -> String? {
        table.service(for: path).flatMap { routeLabels[$0] }
    }
}

/// Proxies a client's requests on its connection's event loop, in the channel pipeline between the
/// HTTP codec and Hummingbird: no task, router, middleware chain or request context per request.
/// Those were over half of the gateway's CPU per proxied request (callgrind), and the gateway is a
/// hop every request pays for.
///
/// It takes every request a route claims whose body, if any, has a length of at most
/// `UpstreamExchangeHandler.bufferedBodyLimit`: it reads the body whole, sends it with the head over
/// the service's `UpstreamPool`, and writes the answer back, streaming it if it is large. It does
/// what `TelemetryMiddleware` and `ProblemMiddleware` do for the router's requests: request id,
/// client address, metrics, the log line, problem+json for an upstream that fails. Everything else
/// goes on to Hummingbird: the gateway's own routes, 404s, and requests whose body streams (chunked,
/// large, or `Expect: 100-continue`), which `ProxyMiddleware` proxies.
///
/// HTTP/1.1 answers go out in the order of the requests, so while one request is being answered
/// (here or by the router) the parts of the next wait, and reads stop until they can go on.
///
/// A client that keeps the gateway waiting is cut off after `GatewayProxy.clientTimeout`: the
/// whole head of its next request must arrive within it of the last answer (or of connecting),
/// each part of a body within it of the one before, and an answer it is slow to read within it of
/// being written. Otherwise a client sending a byte at a time (slowloris), or none at all, holds a
/// connection and its buffers for ever. While the gateway waits for an upstream or the router
/// answers, the client is not timed, except that an answer of the router's the client has stopped
/// reading (the connection unwritable) must be read on within it.
final class ProxyChannelHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// A request this handler proxies.
    private struct Proxied {
        var request: HTTPRequestHead
        var path: Substring
        var service: String
        var pool: UpstreamPool
        var requestID: String
        var client: String
        var started: ContinuousClock.Instant
        var body: ByteBuffer?
        /// Whether the client framed the request with a Content-Length (0 included).
        var hasLength: Bool
        var closeAfter: Bool
        /// The request's `Origin`, for the CORS headers of its answer.
        var origin: String?
        /// The rate limit's decision, taken on its head: refused, or the headers of its answer.
        var rate: RateDecision?
    }

    private enum State {
        case idle
        /// The router has the current request: whether its end has gone on, and whether the router's
        /// answer has ended.
        case passing(requestEnded: Bool, responseEnded: Bool)
        /// Reading a proxied request's body.
        case collecting(Proxied)
        /// Waiting for the upstream, or writing its answer.
        case proxying
        case closed
    }

    private let proxy: GatewayProxy
    private var state = State.idle
    /// Parts of requests after the current one (a client that pipelines).
    private var waiting = CircularBuffer<HTTPServerRequestPart>()
    private var heldRead = false
    /// The server is shutting down: close once the current answer is written.
    private var quiescing = false
    /// The connection's remote address, and the client it is when a request has no X-Forwarded-For.
    private var peer: (address: String, client: String)?
    /// The router's current request asked to close the connection after its answer.
    private var routerCloses = false
    /// Answers written faster than the client reads them: the next request waits until it reads.
    private var awaitingWritable = false
    /// The client closed its side while requests were still being answered here: the router hears
    /// of it (and ends the connection) once they are.
    private var heldInputClosed = false
    /// A request that could not be parsed: nothing after it is answered.
    private var stopped = false
    /// What the gateway waits for from the client, and by when: nil while it waits for nothing.
    private var clientDeadline: (waitingFor: ClientPart, by: NIODeadline)?
    /// One timer per connection, which re-arms itself for a later deadline rather than being
    /// scheduled and cancelled per request (a task per request is measurable here).
    private var clientTimer: Scheduled<Void>?
    /// While an answer waits for the client to read it: the bytes it had left to take when last timed.
    private var answerBacklog: Int?
    /// The user of the last bearer token the connection sent, and until when it holds: a client sends
    /// the same token with every request of a connection, so it is read and looked up once per
    /// connection for the rate limit, not per request.
    private var knownToken: (authorization: String, user: UUID, until: Date)?

    private enum ClientPart { case head, body, answer }

    /// The `Server` header, as Hummingbird sets it on the router's answers.
    static let serverName = "gateway"

    init(proxy: GatewayProxy) {
        self.proxy = proxy
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if waiting.isEmpty && accepts(part) {
            receive(part, context: context)
        } else {
            waiting.append(part)
        }
        watchClient(context: context, progressed: true)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { watchClient(context: context, progressed: false) }
    }

    func channelActive(context: ChannelHandlerContext) {
        watchClient(context: context, progressed: false)
        context.fireChannelActive()
    }

    /// Sets what the gateway waits for from the client after a change of state: the next head or the
    /// reading of an answer (the deadline kept while it stays so), or a body's next part (each part
    /// moves it).
    private func watchClient(context: ChannelHandlerContext, progressed: Bool) {
        let wanted: ClientPart?
        switch state {
        // Reading its answers, the client is timed apart from its next head, which then has the whole time.
        case .idle: wanted = awaitingWritable ? .answer : .head
        // A body read here, or one the router streams on: the upstream timeout, shorter by default,
        // ends an exchange whose upstream stops taking the body before this deadline could.
        case .collecting, .passing(requestEnded: false, _): wanted = .body
        // The router's answer (an event stream above all) is timed only while the client's side is
        // full: a client that stopped reading holds its connection, its buffers and its stream's
        // place until it is cut, and a stream blocked in a write can end no other way.
        case .passing(requestEnded: true, _): wanted = context.channel.isWritable ? nil : .answer
        case .proxying, .closed: wanted = nil
        }
        guard let wanted else {
            clientDeadline = nil
            return
        }
        if let current = clientDeadline, current.waitingFor == wanted, !(wanted == .body && progressed) { return }
        let deadline = NIODeadline.now() + TimeAmount(proxy.clientTimeout)
        clientDeadline = (wanted, deadline)
        answerBacklog = wanted == .answer ? Self.backlog(context) : nil
        if clientTimer == nil { scheduleClientTimer(at: deadline, context: context) }
    }

    private func scheduleClientTimer(at deadline: NIODeadline, context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        clientTimer = context.eventLoop.scheduleTask(deadline: deadline) {
            let (handler, context) = bound.value
            handler.clientTimer = nil
            guard let (part, by) = handler.clientDeadline else { return }
            guard NIODeadline.now() >= by else { return handler.scheduleClientTimer(at: by, context: context) }
            // A client still reading an answer, however slowly, is not cut: what it has taken since the
            // deadline was set gives it another one. A client that took nothing is.
            if part == .answer, let before = handler.answerBacklog, let now = Self.backlog(context), now < before {
                let next = NIODeadline.now() + TimeAmount(handler.proxy.clientTimeout)
                handler.clientDeadline = (.answer, next)
                handler.answerBacklog = now
                return handler.scheduleClientTimer(at: next, context: context)
            }
            handler.proxy.logger.debug("client too slow; connection closed", metadata: ["waiting_for": "\(part)"])
            handler.clientDeadline = nil
            handler.state = .closed
            handler.waiting.removeAll()
            context.close(promise: nil)
        }
    }

    /// The bytes written to the connection that the kernel has not yet taken: they go down only as the
    /// client reads.
    private static func backlog(_ context: ChannelHandlerContext) -> Int? {
        try? context.channel.syncOptions?.getOption(ChannelOptions.bufferedWritableBytes)
    }

    func read(context: ChannelHandlerContext) {
        if waiting.isEmpty && !awaitingWritable {
            context.read()
        } else {
            heldRead = true
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if awaitingWritable && context.channel.isWritable {
            awaitingWritable = false
            drain(context: context)
        }
        if case .passing(requestEnded: true, _) = state { watchClient(context: context, progressed: false) }
        context.fireChannelWritabilityChanged()
    }

    /// The router's answers pass here on their way out; their end lets the next request go on.
    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        context.write(data, promise: promise)
        guard case .end = unwrapOutboundIn(data), case .passing(let requestEnded, _) = state else { return }
        if routerCloses {
            // Hummingbird ends the connection after this answer: what waits here goes nowhere.
            state = .closed
            waiting.removeAll()
            clientDeadline = nil
        } else if requestEnded {
            state = .idle
            // Not from inside the router's write: the next request starts on a fresh stack.
            context.eventLoop.assumeIsolated().execute { self.drain(context: context) }
        } else {
            // The router answered before reading the whole body (a 404, a 413): the rest of the body
            // still goes to it, and is dropped there.
            state = .passing(requestEnded: false, responseEnded: true)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Hummingbird's connection handler closes an idle connection on shutdown; it does not see the
        // requests answered here, so it hears of shutdown only between them.
        if event is ChannelShouldQuiesceEvent {
            switch state {
            case .collecting, .proxying:
                quiescing = true
                return
            case .idle, .passing, .closed:
                break
            }
        }
        // Hummingbird ends the connection when the client closes its side; requests answered here
        // are answered first.
        if let event = event as? ChannelEvent, event == .inputClosed, busy || !waiting.isEmpty {
            heldInputClosed = true
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// A request that cannot be parsed ends the connection: requests waiting behind it are dropped,
    /// one being answered here is answered first, and otherwise the router answers 400.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        stopped = true
        waiting.removeAll()
        switch state {
        case .collecting:
            state = .closed
            context.close(promise: nil)
        case .proxying:
            break  // `finish` closes
        case .idle, .passing, .closed:
            context.fireErrorCaught(error)
        }
    }

    private var busy: Bool {
        switch state {
        case .collecting, .proxying: true
        case .idle, .passing, .closed: false
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        state = .closed
        waiting.removeAll()
        clientDeadline = nil
        clientTimer?.cancel()
        clientTimer = nil
        context.fireChannelInactive()
    }

    // MARK: requests

    private func accepts(_ part: HTTPServerRequestPart) -> Bool {
        if stopped || awaitingWritable { return false }
        switch state {
        case .idle, .collecting, .passing(requestEnded: false, _): return true
        case .passing(requestEnded: true, _), .proxying, .closed: return false
        }
    }

    private func receive(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        switch state {
        case .idle:
            guard case .head(let request) = part else {
                // The decoder gives every request a head, its body and an end, in that order.
                return context.fireChannelRead(wrapInboundOut(part))
            }
            if let proxied = claim(request, context: context) {
                state = .collecting(proxied)
            } else {
                state = .passing(requestEnded: false, responseEnded: false)
                routerCloses = !request.isKeepAlive
                context.fireChannelRead(wrapInboundOut(part))
            }
        case .collecting(var proxied):
            state = .proxying  // the state lets go of the body, which then grows in place
            switch part {
            case .body(var chunk):
                if proxied.body == nil {
                    proxied.body = chunk
                } else {
                    proxied.body!.writeBuffer(&chunk)
                }
                state = .collecting(proxied)
            case .end:
                forward(proxied, context: context)
            case .head:
                // A head before the last request's end: not HTTP/1.1 the decoder lets through.
                state = .closed
                context.close(promise: nil)
            }
        case .passing(requestEnded: false, let responseEnded):
            context.fireChannelRead(wrapInboundOut(part))
            guard case .end = part else { return }
            if responseEnded {
                state = .idle
                drain(context: context)
            } else {
                state = .passing(requestEnded: true, responseEnded: false)
            }
        case .passing(requestEnded: true, _), .proxying, .closed:
            // `accepts` kept these parts waiting.
            preconditionFailure("a request part received while the previous answer is pending")
        }
    }

    /// Parts that waited, as far as the state now takes them; then reads go on.
    private func drain(context: ChannelHandlerContext) {
        var drained = false
        while let part = waiting.first, accepts(part) {
            waiting.removeFirst()
            receive(part, context: context)
            drained = true
        }
        watchClient(context: context, progressed: drained)
        // Hummingbird's async channel hands what it read to the router when a read completes; parts
        // that waited here come outside of one.
        if drained { context.fireChannelReadComplete() }
        if waiting.isEmpty && heldRead && !awaitingWritable {
            heldRead = false
            context.read()
        }
        if waiting.isEmpty && !busy {
            if heldInputClosed {
                heldInputClosed = false
                context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
            }
            if quiescing, case .idle = state {
                // Hummingbird's connection handler closes the connection, now idle.
                quiescing = false
                context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
            }
        }
    }

    /// The request if this handler proxies it: a route claims its path and its body can be read whole.
    private func claim(_ request: HTTPRequestHead, context: ChannelHandlerContext) -> Proxied? {
        let target = request.uri
        // memchr-speed on the target's bytes (`firstIndex` on the UTF-8 view checked each index).
        let cut =
            target.utf8.withContiguousStorageIfAvailable { $0.firstIndex(of: UInt8(ascii: "?")) }
            ?? target.utf8.firstIndex(of: UInt8(ascii: "?")).map { target.utf8.distance(from: target.utf8.startIndex, to: $0) }
        let path = cut.map { target[..<target.utf8.index(target.utf8.startIndex, offsetBy: $0)] } ?? target[...]
        guard let service = proxy.table.service(for: path), let pool = proxy.pools[service] else { return nil }
        // Preflights are the router's (`EdgeMiddleware`), which answers them without a service.
        if request.method == .OPTIONS, proxy.cors.isEnabled { return nil }
        // One pass over the headers for all that decides the path and the request's identity.
        var length: String?
        var requestIDs: [String] = []
        var forwardedFor: [String] = []
        var origin: String?
        var authorization: String?
        for (name, value) in request.headers {
            guard let known = KnownHeader.of(name) else { continue }
            switch known.name {
            case "expect", "transfer-encoding": return nil
            case "content-length": if length == nil { length = value }
            case "x-request-id": requestIDs.append(value)
            // Every line of it: a load balancer may add its own rather than append to the client's.
            case "x-forwarded-for": forwardedFor.append(value)
            case "origin": if origin == nil { origin = value }
            case "authorization": if authorization == nil { authorization = value }
            default: break
            }
        }
        if let length {
            // Over its route's limit: the router's `EdgeMiddleware` answers 413 without reading it.
            guard let bytes = Int(length), bytes <= min(UpstreamExchangeHandler.bufferedBodyLimit, proxy.bodyLimits.limit(for: path)) else { return nil }
        }
        let requestID = RequestIDs.id(from: requestIDs.isEmpty ? nil : requestIDs.joined(separator: ", "))
        if peer == nil {
            let address = context.channel.remoteAddress?.ipAddress ?? "unknown"
            // Once per connection: parsing and printing the address was 3% of a request's instructions.
            peer = (address, proxy.trustedProxies.client(peer: address, forwardedFor: nil))
        }
        let (peerAddress, peerClient) = peer!
        let client = forwardedFor.isEmpty ? peerClient : proxy.trustedProxies.client(peer: peerAddress, forwardedFor: forwardedFor.joined(separator: ", "))
        var rate: RateDecision?
        if let limiter = proxy.limiter {
            let now = Date()
            var user: UUID?
            if let authorization {
                if let known = knownToken, known.until > now, known.authorization == authorization {
                    user = known.user
                } else if let signedIn = limiter.signedIn(authorization, now: now) {
                    knownToken = (authorization, signedIn.user, signedIn.until)
                    user = signedIn.user
                }
            }
            rate = limiter.decide(path: path, user: user, client: client, now: now)
            // Verified only once the address's count has let the request through.
            if user == nil, let authorization, rate?.allowed == true { limiter.verifyLater(authorization, client: client, now: now) }
        }
        return Proxied(
            request: request, path: path, service: service, pool: pool, requestID: requestID, client: client,
            started: .now, body: nil, hasLength: length != nil, closeAfter: !request.isKeepAlive, origin: origin, rate: rate)
    }

    private func forward(_ proxied: Proxied, context: ChannelHandlerContext) {
        if let rate = proxied.rate, !rate.allowed {
            return answer(proxied, with: .failure(rate.problem), context: context)
        }
        let request = proxied.request
        // `claim` took only requests framed by a Content-Length, or by nothing at all.
        let bytes = proxied.body?.readableBytes ?? 0
        let framing: ProxyMiddleware.Framing = proxied.hasLength || bytes > 0 ? .length(bytes) : .none
        let head = HTTPRequestHead(
            version: .http1_1, method: request.method, uri: request.uri,
            headers: ProxyMiddleware.forwardHeaders(request.headers, framing: framing, client: proxied.client, requestID: proxied.requestID))
        let body: OutgoingBody = bytes > 0 ? .whole(proxied.body!) : .none
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        proxied.pool.send(head, body: body, deadline: .now() + TimeAmount(proxy.timeout), on: loop) { result in
            // The pool answers on the connection's loop, which is this one unless it had to open a
            // connection elsewhere.
            if loop.inEventLoop {
                bound.value.0.answer(proxied, with: result, context: bound.value.1)
            } else {
                loop.execute { bound.value.0.answer(proxied, with: result, context: bound.value.1) }
            }
        }
    }

    // MARK: answers

    private func answer(_ proxied: Proxied, with result: Result<UpstreamResponse, any Error>, context: ChannelHandlerContext) {
        guard case .proxying = state else {
            // The client went away; the request still counts, as on the router's path.
            let status =
                switch result {
                case .success(let response): response.head.statusCode
                case .failure(let error): ProxyMiddleware.problem(for: error, service: proxied.service, logger: logger(for: proxied)).status.code
                }
            return record(proxied, status: status)
        }
        // What the gateway sets on every answer, the upstream's or its own problem.
        var added = [("X-Request-ID", proxied.requestID), ("Server", Self.serverName)]
        if proxied.closeAfter { added.append(("Connection", "close")) }
        if proxy.cors.isEnabled { added += proxy.cors.answerHeaders(origin: proxied.origin) }
        if let rate = proxied.rate { added += rate.headers }
        switch result {
        case .success(let response):
            let headers = AnswerHeaders.forClient(response.head, adding: added)
            let status = response.head.status
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            switch response.body {
            case .complete(let body):
                if body.readableBytes > 0 { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
                finish(proxied, status: Int(status.code), context: context)
            case .stream(let stream):
                context.flush()
                relay(stream, for: proxied, status: Int(status.code), context: context)
            }
        case .failure(let error):
            let problem = ProxyMiddleware.problem(for: error, service: proxied.service, logger: logger(for: proxied))
            let (fields, body) = Problem(
                status: problem.status.code, code: problem.code, title: problem.status.reasonPhrase,
                detail: problem.detail, errors: problem.errors, requestID: proxied.requestID
            )
            .encoded(headers: problem.headers)
            var headers = HTTPHeaders(fields)
            for (name, value) in added + [("Content-Length", String(body.readableBytes))] { headers.replaceOrAdd(name: name, value: value) }
            let status = HTTPResponseStatus(statusCode: problem.status.code, reasonPhrase: problem.status.reasonPhrase)
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
            finish(proxied, status: problem.status.code, context: context)
        }
    }

    /// Writes a streamed answer chunk by chunk, each once the previous one has reached the socket:
    /// a slow client slows the upstream's reads instead of filling the gateway's memory.
    private func relay(_ stream: UpstreamBodyStream, for proxied: Proxied, status: Int, context: ChannelHandlerContext) {
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        Task {
            do {
                for try await chunk in stream {
                    try await loop.flatSubmit {
                        let (handler, context) = bound.value
                        return context.writeAndFlush(handler.wrapOutboundOut(.body(.byteBuffer(chunk))))
                    }.get()
                }
                loop.execute {
                    let (handler, context) = bound.value
                    guard case .proxying = handler.state else { return }
                    handler.finish(proxied, status: status, context: context)
                }
            } catch {
                // The head is out: the client can only learn of a broken answer by the connection ending.
                loop.execute {
                    let (handler, context) = bound.value
                    handler.logger(for: proxied).warning("streamed answer broke off", metadata: ["upstream": "\(proxied.service)", "error": "\(error)"])
                    handler.record(proxied, status: status)
                    handler.state = .closed
                    context.close(promise: nil)
                }
            }
        }
    }

    private func finish(_ proxied: Proxied, status: Int, context: ChannelHandlerContext) {
        let closing = proxied.closeAfter || stopped || (quiescing && waiting.isEmpty)
        // The answer goes out before it is logged. A promise only when something waits on the write:
        // a future per request is measurable here.
        if closing {
            // Once the answer is out: a close drops what the socket has not taken yet.
            context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        } else {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
        record(proxied, status: status)
        if closing {
            state = .closed
            return
        }
        state = .idle
        if !context.channel.isWritable {
            awaitingWritable = true
            // The client is to read its answers: it is waited for as for its next request.
            watchClient(context: context, progressed: false)
            return
        }
        drain(context: context)
    }

    private func record(_ proxied: Proxied, status: Int) {
        let duration = ContinuousClock.now - proxied.started
        proxy.metrics.record(method: proxied.request.method.rawValue, route: proxy.routeLabels[proxied.service] ?? "proxy", status: status, duration: duration)
        guard proxy.logger.logLevel <= .info else { return }
        RequestLog.write(
            logger(for: proxied), method: proxied.request.method.rawValue, path: String(proxied.path),
            client: proxied.client, status: status, duration: duration)
    }

    private func logger(for proxied: Proxied) -> Logger {
        var logger = proxy.logger
        logger[metadataKey: "request_id"] = .string(proxied.requestID)
        return logger
    }
}

/// Hummingbird's HTTP/1 channel with a `ProxyChannelHandler` between the HTTP/1 codec and the
/// conversion to Swift's HTTP types: a proxied request is never converted (the conversions were a
/// fifth of the gateway's CPU per request), and the router's requests pass through unchanged.
struct GatewayHTTP1Channel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value

    let http1: HTTP1Channel
    let proxy: GatewayProxy

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        http1.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let pipeline = channel.pipeline.syncOperations
            let codec = try pipeline.handler(type: HTTP1ToHTTPServerCodec.self)
            try pipeline.addHandler(ProxyChannelHandler(proxy: proxy), position: .before(codec))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await http1.handle(value: value, logger: logger)
    }
}
