import CHiredis
import NIOCore
import ServiceKitCore

/// A command on its way to Redis with the promise its reply completes.
struct RedisRequest {
    var arguments: [RedisArgument]
    var promise: EventLoopPromise<RESPValue>?
    var timeout: TimeAmount?
}

/// Encodes commands with hiredis's formatter and decodes replies with hiredis's reader. Replies come
/// back in order, so promises queue up and are completed first-in first-out; that is what makes
/// pipelining many concurrent callers on one connection safe. On a subscriber connection every reply
/// goes to `onPush` instead.
final class RedisChannelHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = RedisRequest
    typealias OutboundOut = ByteBuffer

    private let reader: UnsafeMutablePointer<redisReader>
    private var pending = CircularBuffer<(promise: EventLoopPromise<RESPValue>, name: String, deadline: Scheduled<Void>?)>()
    private let onPush: (@Sendable (RESPValue) -> Void)?
    private var context: ChannelHandlerContext?

    init(onPush: (@Sendable (RESPValue) -> Void)? = nil) {
        self.reader = redisReaderCreate()
        self.onPush = onPush
    }

    deinit {
        redisReaderFree(reader)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        failAll(RedisError.connectionClosed)
        self.context = nil
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        var buffer = context.channel.allocator.buffer(capacity: 64)
        RESPEncoder.encode(request.arguments, into: &buffer)
        // A request that cannot be sent must not take a place in the reply queue.
        guard context.channel.isActive, buffer.readableBytes > 0 else {
            let error: RedisError = buffer.readableBytes == 0 ? .protocolError("cannot encode command") : .connectionClosed
            request.promise?.fail(error)
            promise?.fail(error)
            return
        }
        if let reply = request.promise {
            let name = request.arguments.first.map { String(decoding: $0.bytes, as: UTF8.self) } ?? "?"
            var deadline: Scheduled<Void>? = nil
            if let timeout = request.timeout {
                let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
                deadline = context.eventLoop.scheduleTask(in: timeout) {
                    loopBound.value.timedOut(command: name)
                }
            }
            pending.append((reply, name, deadline))
        }
        context.write(wrapOutboundOut(buffer), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        let fed = buffer.withUnsafeReadableBytes { bytes in
            redisReaderFeed(reader, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count)
        }
        guard fed == REDIS_OK else {
            fail(context: context, RedisError.protocolError(readerError()))
            return
        }
        while true {
            var raw: UnsafeMutableRawPointer? = nil
            guard redisReaderGetReply(reader, &raw) == REDIS_OK else {
                fail(context: context, RedisError.protocolError(readerError()))
                return
            }
            // OK with no reply means the next frame is not complete yet.
            guard let raw else { return }
            let value = RESPValue(reply: raw.assumingMemoryBound(to: redisReply.self))
            freeReplyObject(raw)
            deliver(value)
        }
    }

    private func deliver(_ value: RESPValue) {
        // A subscriber connection still gets the replies of commands sent with a promise (AUTH,
        // SELECT before it subscribes); everything else on it is a push.
        if let onPush, pending.isEmpty {
            onPush(value)
            return
        }
        guard let next = pending.popFirst() else { return }
        next.deadline?.cancel()
        next.promise.succeed(value)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(RedisError.connectionClosed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(context: context, error)
    }

    /// A reply that never came leaves the connection's order in doubt: fail everything and close.
    private func timedOut(command: String) {
        failAll(RedisError.timeout(command: command))
        context?.close(promise: nil)
    }

    private func fail(context: ChannelHandlerContext, _ error: any Error) {
        failAll(error)
        context.close(promise: nil)
    }

    private func failAll(_ error: any Error) {
        while let next = pending.popFirst() {
            next.deadline?.cancel()
            next.promise.fail(error)
        }
    }

    private func readerError() -> String {
        withUnsafeBytes(of: reader.pointee.errstr) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
    }
}
