import Foundation
import HummingbirdCore
import Logging
import Models
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1
import ServiceKit

/// What concerns a client's connection rather than its requests, between NIO's HTTP/1 codec and
/// Hummingbird's conversion to Swift's HTTP types (every request is Hummingbird's to answer):
///
/// A request that does not keep the connection (`Connection: close`, or HTTP/1.0 without
/// `keep-alive`), or a response that says `Connection: close` (a body too large, not read), ends
/// the connection once the response is written, and the response says so. With the client's body
/// still coming, it ends in stages (RFC 9112 §9.6): the gateway's side first, so that the client
/// reads the response to its end, then the whole once the client closes its side, stops sending for
/// `lingerIdleTime` or has lingered `lingerTime`, what the client still sends meanwhile read and
/// dropped. Closed at once with bytes unread, the connection would be reset, and a reset can erase
/// the response from the client's buffers before its HTTP stack reads it: an app uploading a photo
/// would see a broken connection, not the `413` or `429` that tells it what to do. While it ends
/// so, a `DroppingReader` at the head of the pipeline reads and drops what comes, parsing and
/// keeping none of it, whatever the handlers above want; a close asked for meanwhile
/// (Hummingbird's, a graceful shutdown's) waits for the same end. A request sent behind another
/// (pipelined) comes up only once the response before it has ended (NIO's
/// `HTTPServerPipelineHandler`, below this one), and after a response that ends the connection not
/// at all: handed on, its upstream would act on a request whose response no one will read, its body
/// perhaps cut off by the close (RFC 9112 §9.6: no further request is processed). Hummingbird sees
/// only a `Connection` header that is exactly `close`, and HTTP/1.0's default not at all. A
/// response of unknown length (streamed) to an HTTP/1.0 request is sent as HTTP/1.0, without
/// chunks, which that version does not know, and ends the connection, whose end is then where its
/// body ends (RFC 9112 §6.1, §6.3): Hummingbird answers every request as HTTP/1.1, which NIO would
/// frame in chunks.
///
/// A client that keeps the gateway waiting is cut off after `timeout`: the whole head of its next
/// request must arrive within it of the last response (or of connecting), and a response it is slow
/// to read within it of being written. A body has `timeout` from its head, and each part moves the
/// deadline on by what its bytes earn at `bodyMinRate` bytes a second (never past `timeout` from
/// now), as Apache's `mod_reqtimeout` does: a body that keeps coming at that rate or faster is never
/// cut, one trickling a byte at a time is cut about `timeout` after it began. Otherwise a client
/// sending a byte at a time (slowloris), or none at all, holds a connection and its buffers for
/// ever. While the gateway works on a request (an upstream, or the router, responding) the
/// client is not timed, except that a response it has stopped reading (the connection unwritable)
/// must be read on within it: an event stream blocked in a write can end no other way.
///
/// A request that asks to be told to go on (`Expect: 100-continue`, HTTP/1.1) is told so (`100
/// Continue`, RFC 9110 §10.1.1) when the gateway is about to read its body, the edge's checks passed
/// (`SendContinue`, from `EdgeMiddleware`), as nginx tells it when it starts reading: a request
/// refused first (`413`, `429`, `503`) is answered without the client sending a body it would not
/// take, and the connection then ends, since the body the client did not send cannot be read past.
/// Never once a response to it has begun, nor while another response is under way: a request read
/// ahead (pipelined) is told once the responses before it have ended.
///
/// A request that asks to switch protocols (`Upgrade` named in `Connection`, or `CONNECT`) is
/// answered as HTTP/1.1, and the connection ends with its response: NIO's parser reads nothing after
/// such a request, so whatever the client sent next would only pile up unread. Nothing more is read
/// from the connection once that request has ended.
///
/// A request whose head is not HTTP/1.1 (a malformed header, two lengths, a length and chunks) is
/// answered here, as the API answers every problem (`400 malformed_request`, problem+json, with its
/// request id), and the connection ends: Hummingbird's own answer has no body.
final class ClientConnectionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private enum ClientPart { case head, body, response }

    private let timeout: TimeAmount
    private let bodyMinRate: Int64
    private let logger: Logger
    /// The size of the body part just read.
    private var lastBodyBytes = 0
    /// A request's head has come and its end not yet.
    private var readingBody = false
    /// Requests whose head has come, and responses that have ended: the gateway owes a response
    /// while the first is ahead (by one at most: NIO's pipelining handler holds the next request back
    /// until the response before it has ended).
    private var requestsRead = 0
    private var responsesEnded = 0
    /// Each request read and not yet responded to, oldest first: whether it keeps the connection,
    /// whether it asked for `100 Continue` (told once the responses before it have ended), and
    /// whether it is HTTP/1.0.
    private var pending = CircularBuffer<(keepsConnection: Bool, expectsContinue: Bool, http10: Bool)>()
    /// The current response ends the connection.
    private var closesAfterResponse = false
    /// What the gateway waits for from the client, and by when: nil while it waits for nothing.
    private var deadline: (waitingFor: ClientPart, by: NIODeadline)?
    /// One timer per connection, which re-arms itself for a later deadline rather than being
    /// scheduled and cancelled per request.
    private var timer: Scheduled<Void>?
    /// While a response waits for the client to read it: the bytes it had left to take when last timed.
    private var backlog: Int?
    /// The request being read asked for `100 Continue`, and has not had it (nor a response) yet.
    private var continueOwed = false
    /// The request being read asks to switch protocols; once it has ended, nothing more is read.
    private var switching = false
    private var readsStopped = false
    /// A response that ends the connection has ended: nothing more is written. A request read ahead
    /// of the close goes unanswered rather than have its response sent after a body whose end is the
    /// connection's (HTTP/1.0), where it would be read as part of that body.
    private var outputEnded = false
    /// A head that was not HTTP has been answered.
    private var answeredMalformed = false
    /// The connection is ending in stages: the gateway's side is closed, what the client still sends
    /// is dropped, and this ends the rest.
    private var lingering: Scheduled<Void>?
    /// The longest a connection ending in stages waits for the client to close its side (nginx's
    /// `lingering_time`), never longer than the client's own timeout.
    static let lingerTime = TimeAmount.seconds(30)
    /// The longest it waits for the client's next bytes meanwhile (nginx's `lingering_timeout`): a
    /// client still sending a large body is not cut off while its bytes keep coming, however slowly
    /// the gateway gets to read them, and one that has gone quiet is let go soon.
    static let lingerIdleTime = TimeAmount.seconds(5)

    /// What `EdgeMiddleware` sends down the pipeline once its checks have passed, as the body is about
    /// to be read: the `100 Continue` the request asked for, if it did.
    struct SendContinue {}

    init(timeout: Duration, bodyMinRate: Int, logger: Logger) {
        self.timeout = TimeAmount(timeout)
        self.bodyMinRate = Int64(max(1, bodyMinRate))
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { watch(context: context, progressed: false) }
    }

    func channelActive(context: ChannelHandlerContext) {
        watch(context: context, progressed: false)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard lingering == nil, !outputEnded else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            // Only with no response under way: a `100` between another response's parts would break
            // it. A request read ahead is owed its `100` once the responses before it have ended.
            let expects = Self.expectsContinue(head)
            continueOwed = requestsRead == responsesEnded && expects
            requestsRead += 1
            readingBody = true
            switching = Self.switchesProtocols(head)
            pending.append((keepsConnection: head.isKeepAlive && !switching, expectsContinue: expects, http10: head.version == .http1_0))
        case .body(let part): lastBodyBytes = part.readableBytes
        case .end:
            readingBody = false
            continueOwed = false
            readsStopped = readsStopped || switching
        }
        context.fireChannelRead(data)
        watch(context: context, progressed: true)
    }

    /// As NIO's parser (llhttp) takes a request for a switch: `CONNECT`, or an `Upgrade` header with
    /// `upgrade` among `Connection`'s tokens.
    static func switchesProtocols(_ head: HTTPRequestHead) -> Bool {
        head.method == .CONNECT
            || (head.headers.contains(name: "upgrade")
                && head.headers["connection"].contains { $0.split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces).lowercased() == "upgrade" } })
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // What comes after a refused body need not be HTTP: it is dropped, not answered.
        guard lingering == nil, !outputEnded else { return }
        // With a response owed (the head came, the body broke), the route's problem answers it.
        guard error is HTTPParserError, requestsRead == responsesEnded, !answeredMalformed else { return context.fireErrorCaught(error) }
        answeredMalformed = true
        let requestID = UUID().uuidString.lowercased()
        let problem = Problem(status: 400, code: "malformed_request", title: "Bad Request", detail: "The request is not valid HTTP/1.1: \(error).", requestID: requestID)
        let (fields, body) = problem.encoded()
        var head = HTTPResponseHead(version: .http1_1, status: .badRequest)
        for field in fields { head.headers.add(name: field.name.canonicalName, value: field.value) }
        head.headers.add(name: "content-length", value: String(body.readableBytes))
        head.headers.add(name: "connection", value: "close")
        head.headers.add(name: "x-request-id", value: requestID)
        head.headers.add(name: "server", value: GatewayHTTP1Channel.serverName)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }

    func read(context: ChannelHandlerContext) {
        if !readsStopped { context.read() }
    }

    /// Hummingbird's own closes (its connection state's, after a request that said `Connection:
    /// close`, or a graceful shutdown's) end the connection in stages too when the client's body is
    /// still coming, and wait for that end when it is already ending so: closed at once, it would be
    /// reset all the same.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard mode == .all, lingering != nil || readingBody, context.channel.isActive else { return context.close(mode: mode, promise: promise) }
        endConnection(context: context)
        if let promise { context.channel.closeFuture.cascade(to: promise) }
    }

    /// Ends the connection after a response that ends it: at once, or in stages while the client's
    /// body is still coming (see the type's notes). Once it is ending in stages, the linger's timer or
    /// the client's own close ends it.
    private func endConnection(context: ChannelHandlerContext) {
        guard lingering == nil else { return }
        guard readingBody, context.channel.isActive else { return context.close(promise: nil) }
        outputEnded = true
        deadline = nil
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        lingering = context.eventLoop.scheduleTask(in: min(timeout, Self.lingerTime)) { bound.value.close(promise: nil) }
        // Nothing the client sends now reaches NIO's HTTP parser, which would keep what it cannot
        // parse (what follows an `Upgrade` request) for as long as the connection lasts.
        try? context.pipeline.syncOperations.addHandler(DroppingReader(idleTime: min(timeout, Self.lingerIdleTime)), position: .first)
        let outputClosed = context.eventLoop.makePromise(of: Void.self)
        // Without a side to close alone, the whole.
        outputClosed.futureResult.assumeIsolated().whenFailure { _ in context.close(promise: nil) }
        context.close(mode: .output, promise: outputClosed)
    }

    static func expectsContinue(_ head: HTTPRequestHead) -> Bool {
        (head.version.major, head.version.minor) >= (1, 1) && head.headers["expect"].contains { $0.trimmingCharacters(in: .whitespaces).lowercased() == "100-continue" }
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard event is SendContinue else { return context.triggerUserOutboundEvent(event, promise: promise) }
        if continueOwed {
            continueOwed = false
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .continue))), promise: nil)
        }
        promise?.succeed(())
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard !outputEnded else {
            promise?.fail(ChannelError.outputClosed)
            return
        }
        switch unwrapOutboundIn(data) {
        case .head(var head):
            // A response to a request still waiting to be told to send its body: the client may never
            // send it, or send it late, so nothing after it on the connection could be read as a request.
            let bodyNotAskedFor = continueOwed && readingBody
            // The response has begun: a `100` after it would be out of place.
            continueOwed = false
            // Of unknown length to HTTP/1.0: its end is the connection's.
            let unframedForHTTP10 = pending.first?.http10 == true && Self.hasBodyOfUnknownLength(head)
            if unframedForHTTP10 { head.version = .http1_0 }
            // A response with no request read (a parse error's 400) ends the connection too.
            closesAfterResponse = !(pending.first?.keepsConnection ?? false) || !head.isKeepAlive || bodyNotAskedFor || unframedForHTTP10
            let saysClose = head.headers.first(name: "connection") == "close"
            if closesAfterResponse, !saysClose { head.headers.replaceOrAdd(name: "connection", value: "close") }
            if (closesAfterResponse && !saysClose) || unframedForHTTP10 {
                context.write(wrapOutboundOut(.head(head)), promise: promise)
            } else {
                context.write(data, promise: promise)
            }
        case .body:
            context.write(data, promise: promise)
        case .end:
            responsesEnded += 1
            _ = pending.popFirst()
            // The request read ahead is now the one answered next: if its body is still to come and it
            // asked to be told, it is owed its `100`.
            if requestsRead == responsesEnded + 1, readingBody, pending.first?.expectsContinue == true { continueOwed = true }
            guard closesAfterResponse else {
                context.write(data, promise: promise)
                break
            }
            outputEnded = true
            // Once the response is out: a close drops what the socket has not taken yet.
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.cascade(to: promise)
            written.futureResult.assumeIsolated().whenComplete { _ in self.endConnection(context: context) }
            context.write(data, promise: written)
            context.flush()
        }
        watch(context: context, progressed: false)
    }

    /// A response that may have a body (RFC 9110 §6.4.1) and says nothing of its length: NIO frames
    /// it in chunks for HTTP/1.1. (A response to HEAD is sent without its body whatever this says.)
    static func hasBodyOfUnknownLength(_ head: HTTPResponseHead) -> Bool {
        let code = head.status.code
        return code >= 200 && code != 204 && code != 304 && !head.headers.contains(name: "content-length")
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        watch(context: context, progressed: false)
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        lingering?.cancel()
        deadline = nil
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }

    /// Sets what the gateway waits for from the client after a change: the next head or the reading
    /// of a response (the deadline kept while it stays so), or a body's next part (each part moves it).
    private func watch(context: ChannelHandlerContext, progressed: Bool) {
        guard lingering == nil else { return }
        let wanted: ClientPart?
        if readingBody {
            // The upstream timeout, shorter by default, ends an exchange whose upstream stops taking
            // the body before this deadline could.
            wanted = .body
        } else if requestsRead > responsesEnded {
            wanted = context.channel.isWritable ? nil : .response
        } else {
            // Reading its responses, the client is timed apart from its next head, which then has the whole time.
            wanted = context.channel.isWritable ? .head : .response
        }
        guard let wanted else {
            deadline = nil
            return
        }
        if let current = deadline, current.waitingFor == wanted, !(wanted == .body && progressed) { return }
        var by = NIODeadline.now() + timeout
        if wanted == .body, let current = deadline, current.waitingFor == .body {
            by = min(by, current.by + .nanoseconds(Int64(lastBodyBytes) * 1_000_000_000 / bodyMinRate))
        }
        deadline = (wanted, by)
        backlog = wanted == .response ? Self.backlog(context) : nil
        if timer == nil { schedule(at: by, context: context) }
    }

    private func schedule(at by: NIODeadline, context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(deadline: by) {
            let (handler, context) = bound.value
            handler.timer = nil
            guard let (part, by) = handler.deadline else { return }
            guard NIODeadline.now() >= by else { return handler.schedule(at: by, context: context) }
            // A client still reading a response, however slowly, is not cut: what it has taken since
            // the deadline was set gives it another one. A client that took nothing is.
            if part == .response, let before = handler.backlog, let now = Self.backlog(context), now < before {
                let next = NIODeadline.now() + handler.timeout
                handler.deadline = (.response, next)
                handler.backlog = now
                return handler.schedule(at: next, context: context)
            }
            handler.logger.debug("client too slow; connection closed", metadata: ["waiting_for": "\(part)"])
            handler.deadline = nil
            context.close(promise: nil)
        }
    }

    /// The bytes written to the connection that the kernel has not yet taken: they go down only as the
    /// client reads.
    private static func backlog(_ context: ChannelHandlerContext) -> Int? {
        try? context.channel.syncOptions?.getOption(ChannelOptions.bufferedWritableBytes)
    }
}

/// What a client sends once the gateway's side of its connection has closed, read and dropped: at
/// the head of the pipeline, so that none of it is parsed or kept, and reading on its own, since the
/// handlers above it may want nothing more (Hummingbird reads no further after a request that said
/// `Connection: close`, and its buffer of parts holds reads back when full). It closes the
/// connection once `idleTime` passes with nothing read, and at the latest `idleTime` after a
/// graceful shutdown begins (NIO's quiesce event, which it is the first to see): a stopping process
/// is not held for the whole linger by a client still sending.
final class DroppingReader: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    let idleTime: TimeAmount
    private var idle: Scheduled<Void>?
    private var quiescing = false

    init(idleTime: TimeAmount) {
        self.idleTime = idleTime
    }

    func handlerAdded(context: ChannelHandlerContext) {
        waitForMore(context: context)
        context.read()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        idle?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    /// Once a read's bytes are dropped, not for each part of it: one timer a read.
    func channelReadComplete(context: ChannelHandlerContext) {
        if !quiescing { waitForMore(context: context) }
        context.read()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, !quiescing {
            waitForMore(context: context)
            quiescing = true
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        idle?.cancel()
        context.fireChannelInactive()
    }

    /// A reset or an error reading: the connection is over, and NIO closes it.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {}

    private func waitForMore(context: ChannelHandlerContext) {
        idle?.cancel()
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        idle = context.eventLoop.scheduleTask(in: idleTime) { bound.value.close(promise: nil) }
    }
}

/// Hummingbird's HTTP/1 channel with a `ClientConnectionHandler` between the HTTP/1 codec and the
/// conversion to Swift's HTTP types.
struct GatewayHTTP1Channel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value

    /// The `Server` header of every response, as Hummingbird sets it.
    static let serverName = "gateway"

    let http1: HTTP1Channel
    let clientTimeout: Duration
    let bodyMinRate: Int
    let logger: Logger

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let (timeout, minRate, deadlineLogger) = (clientTimeout, bodyMinRate, self.logger)
        return http1.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let pipeline = channel.pipeline.syncOperations
            let codec = try pipeline.handler(type: HTTP1ToHTTPServerCodec.self)
            let connection = ClientConnectionHandler(timeout: timeout, bodyMinRate: minRate, logger: deadlineLogger)
            try pipeline.addHandler(connection, position: .before(codec))
            // NIO's own: a request behind one still being answered (pipelined) is read only once that
            // response has ended, and never after one that ends the connection (RFC 9112 §9.6: no
            // further request is processed). Read ahead, Hummingbird would act on it meanwhile.
            try pipeline.addHandler(HTTPServerPipelineHandler(), position: .before(connection))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await http1.handle(value: value, logger: logger)
    }
}
