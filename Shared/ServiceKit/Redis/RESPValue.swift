import CHiredis
import NIOCore
import ServiceKitCore

/// A Redis reply, copied out of hiredis's reply tree so that it can cross threads.
public enum RESPValue: Sendable, Equatable {
    case simpleString(String)
    case error(String)
    case integer(Int)
    case bulkString([UInt8])
    case array([RESPValue])
    case null

    /// The reply as text, for status, bulk and integer replies.
    public var string: String? {
        switch self {
        case .simpleString(let value): value
        case .bulkString(let bytes): String(decoding: bytes, as: UTF8.self)
        case .integer(let value): String(value)
        default: nil
        }
    }

    public var int: Int? {
        switch self {
        case .integer(let value): value
        case .bulkString, .simpleString: string.flatMap { Int($0) }
        default: nil
        }
    }

    public var array: [RESPValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    /// An array of alternating names and values (a reply of `XINFO GROUPS` or `XINFO CONSUMERS`
    /// for one group or consumer), by name; empty for anything else.
    package var fields: [String: RESPValue] {
        let items = array ?? []
        var fields: [String: RESPValue] = [:]
        for index in stride(from: 0, to: items.count - 1, by: 2) {
            if let name = items[index].string { fields[name] = items[index + 1] }
        }
        return fields
    }

    package var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// Copies a hiredis reply; the caller still frees it.
    init(reply: UnsafePointer<redisReply>) {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_STRING:
            self = .bulkString(Self.bytes(r.str, r.len))
        case REDIS_REPLY_STATUS:
            self = .simpleString(String(decoding: Self.bytes(r.str, r.len), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            self = .error(String(decoding: Self.bytes(r.str, r.len), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            self = .integer(Int(r.integer))
        case REDIS_REPLY_ARRAY:
            var values: [RESPValue] = []
            values.reserveCapacity(r.elements)
            for index in 0..<r.elements {
                if let element = r.element[index] {
                    values.append(RESPValue(reply: element))
                } else {
                    values.append(.null)
                }
            }
            self = .array(values)
        default:
            self = .null
        }
    }

    private static func bytes(_ pointer: UnsafeMutablePointer<CChar>?, _ length: Int) -> [UInt8] {
        guard let pointer, length > 0 else { return [] }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) { Array(UnsafeBufferPointer(start: $0, count: length)) }
    }
}

/// One argument of a Redis command; binary-safe.
public struct RedisArgument: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    public var bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public init(_ string: String) { self.bytes = Array(string.utf8) }
    public init(_ int: Int) { self.bytes = Array(String(int).utf8) }
    public init(stringLiteral value: String) { self.init(value) }
    public init(integerLiteral value: Int) { self.init(value) }
}

/// Errors of the Redis client, each with a message that says what to check.
package enum RedisError: Error, CustomStringConvertible, Equatable {
    /// The server answered with an error reply (`ERR …`, `BUSYGROUP …`, `NOSCRIPT …`).
    case server(String)
    case timeout(command: String)
    case connectionClosed
    case unavailable(String)
    case protocolError(String)
    case unexpectedReply(String)

    package var description: String {
        switch self {
        case .server(let message): "Redis error: \(message)"
        case .timeout(let command): "Redis command \(command) timed out"
        case .connectionClosed: "Redis connection closed"
        case .unavailable(let reason): "Redis unavailable: \(reason)"
        case .protocolError(let reason): "Redis protocol error: \(reason)"
        case .unexpectedReply(let reply): "unexpected Redis reply: \(reply)"
        }
    }
}

/// hiredis's command formatter: argv in, RESP bytes out.
enum RESPEncoder {
    static func encode(_ arguments: [RedisArgument], into buffer: inout ByteBuffer) {
        // One contiguous copy of every argument, plus one byte so the base address is never nil.
        var blob: [UInt8] = []
        blob.reserveCapacity(arguments.reduce(1) { $0 + $1.bytes.count })
        for argument in arguments { blob.append(contentsOf: argument.bytes) }
        blob.append(0)
        let lengths = arguments.map(\.bytes.count)
        blob.withUnsafeBufferPointer { base in
            var pointers: [UnsafePointer<CChar>?] = []
            pointers.reserveCapacity(arguments.count)
            var offset = 0
            let raw = UnsafeRawPointer(base.baseAddress!)
            for length in lengths {
                pointers.append((raw + offset).assumingMemoryBound(to: CChar.self))
                offset += length
            }
            var target: UnsafeMutablePointer<CChar>? = nil
            let written = pointers.withUnsafeMutableBufferPointer { argv in
                lengths.withUnsafeBufferPointer { argvlen in
                    redisFormatCommandArgv(&target, Int32(arguments.count), argv.baseAddress, argvlen.baseAddress)
                }
            }
            guard written > 0, let target else { return }
            target.withMemoryRebound(to: UInt8.self, capacity: Int(written)) {
                buffer.writeBytes(UnsafeBufferPointer(start: $0, count: Int(written)))
            }
            redisFreeCommand(target)
        }
    }
}
