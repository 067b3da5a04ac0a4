import NIOCore
import NIOHTTP1

/// The head of an HTTP/1.1 answer as it came off the wire: its status, how its body is framed,
/// whether the connection stays open, and where each header line is. Nothing in it is turned into a
/// string unless asked for, so a proxy can pass the lines it keeps on as the bytes they are: turning
/// every header of every answer into strings and back was a sixth of the gateway's CPU per request.
public struct HTTP1AnswerHead: Sendable {
    public enum Framing: Sendable, Equatable {
        /// No body: a 1xx, 204 or 304, or the answer to a HEAD (RFC 9112 §6.3).
        case none
        case length(Int)
        case chunked
        /// Until the connection closes: no framing header, or a transfer coding other than chunked last.
        case untilClose
    }

    /// A header line: its name, its value (less the whitespace around it) and the whole line with its
    /// CRLF, as offsets into `bytes`.
    public struct Field: Sendable {
        public let name: Range<Int>
        public let value: Range<Int>
        public let line: Range<Int>
    }

    /// The head's bytes, from the status line to the empty line that ends it.
    public let bytes: ByteBuffer
    public let statusCode: Int
    /// The status line after `HTTP/1.x ` (code, reason and CRLF), as offsets into `bytes`.
    public let statusLineRest: Range<Int>
    public let framing: Framing
    /// Whether the server keeps the connection open after this answer.
    public let keepAlive: Bool
    public let fields: [Field]
    /// The header names the `Connection` header lists (beyond `close` and `keep-alive`), as offsets
    /// into `bytes`: hop-by-hop for this answer (RFC 9110 §7.6.1).
    public let connectionNames: [Range<Int>]

    public func string(_ range: Range<Int>) -> String {
        bytes.getString(at: bytes.readerIndex + range.lowerBound, length: range.count) ?? ""
    }

    /// Whether `field`'s name is `name`, ignoring ASCII case.
    public func field(_ field: Field, isNamed name: String) -> Bool {
        Self.equalIgnoringCase(bytes, field.name, name)
    }

    /// Whether the `Connection` header names `field`.
    public func isNamedByConnection(_ field: Field) -> Bool {
        connectionNames.contains { Self.equalIgnoringCase(bytes, field.name, bytes, $0) }
    }

    /// The first value of the header named `name`.
    public func value(named name: String) -> String? {
        fields.first { field($0, isNamed: name) }.map { string($0.value) }
    }

    /// As NIO's status type, for code off the proxy's path.
    public var status: HTTPResponseStatus {
        // The reason starts after the three digits and a space.
        let reason = statusLineRest.count > 6 ? string(statusLineRest.lowerBound + 4..<statusLineRest.upperBound - 2) : ""
        return HTTPResponseStatus(statusCode: statusCode, reasonPhrase: reason)
    }

    static func equalIgnoringCase(_ buffer: ByteBuffer, _ range: Range<Int>, _ name: String) -> Bool {
        guard range.count == name.utf8.count else { return false }
        return buffer.withUnsafeReadableBytes { bytes in
            var i = range.lowerBound
            for expected in name.utf8 {
                if lower(bytes[i]) != lower(expected) { return false }
                i += 1
            }
            return true
        }
    }

    static func equalIgnoringCase(_ buffer: ByteBuffer, _ a: Range<Int>, _ other: ByteBuffer, _ b: Range<Int>) -> Bool {
        guard a.count == b.count else { return false }
        return buffer.withUnsafeReadableBytes { x in
            other.withUnsafeReadableBytes { y in
                zip(a, b).allSatisfy { lower(x[$0]) == lower(y[$1]) }
            }
        }
    }

    static func lower(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }
}

/// Reads HTTP/1.1 answers off a connection's bytes (RFC 9112): the head, then the body as it
/// arrives, unframed (a chunked body's chunk lines and trailers are read and dropped), then the end.
/// Interim answers (`100 Continue`) are skipped. Anything that is not a well-formed answer throws:
/// a proxy that guessed would pass its guess on to a client.
///
/// Pull one part at a time with `next(_:)`, which leaves what it has not read in the buffer (or
/// keeps an unfinished head or chunk line until more bytes come).
public struct HTTP1AnswerReader: Sendable {
    public enum Part: Sendable {
        case head(HTTP1AnswerHead)
        case body(ByteBuffer)
        case end
    }

    public struct Malformed: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// A head, chunk line or trailer section longer than this is refused.
    public static let maxHeadBytes = 64 * 1024

    private enum State: Sendable {
        /// No answer is expected: bytes now are an error.
        case idle
        case head
        case length(remaining: Int)
        case chunkLine
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
    }

    private var state = State.idle
    private var answersHEAD = false
    /// The body just read was the last of the answer: `.end` comes next, bytes or not.
    private var endDue = false
    /// The start of an unfinished head, chunk line or trailer section.
    private var held: ByteBuffer?

    public init() {}

    /// Expects an answer; one to a HEAD request has no body whatever its head says.
    public mutating func expectAnswer(toHEAD: Bool) {
        state = .head
        answersHEAD = toHEAD
        endDue = false
        held = nil
    }

    /// The next part, reading from `bytes`; nil when it needs more bytes.
    public mutating func next(_ bytes: inout ByteBuffer) throws(Malformed) -> Part? {
        if endDue {
            endDue = false
            return .end
        }
        if var start = held, bytes.readableBytes > 0 {
            held = nil
            start.writeBuffer(&bytes)
            bytes = start
        }
        while bytes.readableBytes > 0 {
            switch state {
            case .idle:
                throw Malformed("bytes after the answer, or an answer nobody asked for")
            case .head:
                guard let length = Self.headLength(bytes) else { return try hold(&bytes) }
                let head = try Self.parseHead(bytes.readSlice(length: length)!, answersHEAD: answersHEAD)
                // Interim answers are not the answer (RFC 9110 §15.2); a switch of protocols was never asked for.
                if head.statusCode == 101 { throw Malformed("a protocol switch nobody asked for") }
                if head.statusCode < 200 { continue }
                switch head.framing {
                case .none, .length(0): finished()
                case .length(let length): state = .length(remaining: length)
                case .chunked: state = .chunkLine
                case .untilClose: state = .untilClose
                }
                return .head(head)
            case .length(let remaining):
                let taken = min(remaining, bytes.readableBytes)
                let part = bytes.readSlice(length: taken)!
                if taken == remaining { finished() } else { state = .length(remaining: remaining - taken) }
                return .body(part)
            case .chunkLine:
                guard let line = try Self.lineLength(bytes) else { return try hold(&bytes) }
                let size = try Self.chunkSize(bytes.readSlice(length: line)!)
                bytes.moveReaderIndex(forwardBy: 2)
                state = size == 0 ? .trailers : .chunkData(remaining: size)
            case .chunkData(let remaining):
                let taken = min(remaining, bytes.readableBytes)
                let part = bytes.readSlice(length: taken)!
                state = taken == remaining ? .chunkDataEnd : .chunkData(remaining: remaining - taken)
                return .body(part)
            case .chunkDataEnd:
                guard bytes.readableBytes >= 2 else { return try hold(&bytes) }
                guard bytes.readInteger(as: UInt16.self) == 0x0D0A else { throw Malformed("a chunk longer than its size") }
                state = .chunkLine
            case .trailers:
                // Trailers are dropped: nothing the gateway passes on reads them.
                guard let line = try Self.lineLength(bytes) else { return try hold(&bytes) }
                bytes.moveReaderIndex(forwardBy: line + 2)
                if line == 0 {
                    state = .idle
                    return .end
                }
            case .untilClose:
                return .body(bytes.readSlice(length: bytes.readableBytes)!)
            }
        }
        return nil
    }

    /// The connection closed: the end of an answer framed by the close, else nil if no answer was
    /// being read; throws for an answer broken off.
    public mutating func closed() throws(Malformed) -> Part? {
        if endDue {
            endDue = false
            return .end
        }
        switch state {
        case .idle: return nil
        case .untilClose:
            state = .idle
            return .end
        default: throw Malformed("the connection closed in the middle of the answer")
        }
    }

    private mutating func finished() {
        state = .idle
        endDue = true
    }

    /// Keeps the start of something unfinished for the next bytes.
    private mutating func hold(_ bytes: inout ByteBuffer) throws(Malformed) -> Part? {
        guard bytes.readableBytes <= Self.maxHeadBytes else { throw Malformed("a head or chunk line over \(Self.maxHeadBytes) bytes") }
        held = bytes
        bytes.moveReaderIndex(to: bytes.writerIndex)
        return nil
    }
}

extension HTTP1AnswerReader {
    private static let cr = UInt8(ascii: "\r")
    private static let lf = UInt8(ascii: "\n")

    /// The head's length up to and with its empty line, if it is all there.
    static func headLength(_ buffer: ByteBuffer) -> Int? {
        buffer.withUnsafeReadableBytes { bytes -> Int? in
            var i = 0
            // The end is "\r\n\r\n": look for each LF and check the three bytes before it.
            while i + 3 < bytes.count {
                guard let lf = bytes[(i + 3)...].firstIndex(of: Self.lf) else { return nil }
                if lf >= 3 && bytes[lf - 1] == cr && bytes[lf - 2] == Self.lf && bytes[lf - 3] == cr { return lf + 1 }
                i = lf - 2
            }
            return nil
        }
    }

    /// The length of the line at the buffer's start, less its CRLF, if it is all there.
    static func lineLength(_ buffer: ByteBuffer) throws(Malformed) -> Int? {
        let found = buffer.withUnsafeReadableBytes { bytes -> Int?? in
            guard let lf = bytes.firstIndex(of: Self.lf) else { return .some(nil) }
            guard lf > 0 && bytes[lf - 1] == cr else { return nil }
            return lf - 1
        }
        guard let found else { throw Malformed("a line that does not end in CRLF") }
        return found
    }

    /// A chunk line's size: hexadecimal digits, then optional extensions (ignored).
    static func chunkSize(_ line: ByteBuffer) throws(Malformed) -> Int {
        let size = line.withUnsafeReadableBytes { bytes -> Int? in
            var size = 0
            var digits = 0
            for byte in bytes {
                let digit: Int
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = Int(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = Int(byte - UInt8(ascii: "a")) + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = Int(byte - UInt8(ascii: "A")) + 10
                case UInt8(ascii: ";"), UInt8(ascii: " "), UInt8(ascii: "\t"):
                    return digits > 0 ? size : nil
                default: return nil
                }
                digits += 1
                // Sixteen hex digits would overflow; no chunk is that large.
                guard digits <= 15 else { return nil }
                size = size << 4 | digit
            }
            return digits > 0 ? size : nil
        }
        guard let size else { throw Malformed("a chunk line that is not a size") }
        return size
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "*"),
            UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }

    /// Parses a whole head (status line, header lines, empty line) and decides the body's framing.
    static func parseHead(_ head: ByteBuffer, answersHEAD: Bool) throws(Malformed) -> HTTP1AnswerHead {
        let parsed = head.withUnsafeReadableBytes { bytes -> Result<HTTP1AnswerHead, Malformed> in
            func byte(_ i: Int) -> UInt8 { bytes[i] }
            func isDigit(_ i: Int) -> Bool { byte(i) >= UInt8(ascii: "0") && byte(i) <= UInt8(ascii: "9") }
            // "HTTP/1.x SSS" then " reason" or nothing, then CRLF.
            let prefix = Array("HTTP/1.".utf8)
            guard bytes.count >= 14, zip(bytes.prefix(7), prefix).allSatisfy({ $0 == $1 }), isDigit(7), byte(8) == UInt8(ascii: " "),
                isDigit(9), isDigit(10), isDigit(11)
            else { return .failure(Malformed("not an HTTP/1 status line")) }
            let minor = byte(7) - UInt8(ascii: "0")
            let status = Int(byte(9) - 48) * 100 + Int(byte(10) - 48) * 10 + Int(byte(11) - 48)
            guard status >= 100 else { return .failure(Malformed("a status below 100")) }
            guard let statusEnd = bytes.firstIndex(of: lf), statusEnd >= 13, byte(statusEnd - 1) == cr,
                statusEnd == 13 || byte(12) == UInt8(ascii: " ")
            else { return .failure(Malformed("a status line that does not end as one")) }
            for i in 12..<(statusEnd - 1) where byte(i) < 0x20 && byte(i) != 0x09 || byte(i) == 0x7F {
                return .failure(Malformed("a control character in the reason"))
            }
            var fields: [HTTP1AnswerHead.Field] = []
            fields.reserveCapacity(12)
            var connectionNames: [Range<Int>] = []
            var length: Int?
            var chunkedLast: Bool?
            var otherCoding = false
            var close = false
            var keepAliveToken = false
            var start = statusEnd + 1
            // The empty line is the head's last two bytes.
            while start < bytes.count - 2 {
                guard let lf = bytes[start...].firstIndex(of: lf), byte(lf - 1) == cr else { return .failure(Malformed("a header line that does not end in CRLF")) }
                let end = lf - 1
                guard let colon = bytes[start..<end].firstIndex(of: UInt8(ascii: ":")), colon > start,
                    (start..<colon).allSatisfy({ isTokenByte(byte($0)) })
                else { return .failure(Malformed("a header line without a name")) }
                var valueStart = colon + 1
                var valueEnd = end
                while valueStart < valueEnd && (byte(valueStart) == 0x20 || byte(valueStart) == 0x09) { valueStart += 1 }
                while valueEnd > valueStart && (byte(valueEnd - 1) == 0x20 || byte(valueEnd - 1) == 0x09) { valueEnd -= 1 }
                for i in valueStart..<valueEnd where (byte(i) < 0x20 && byte(i) != 0x09) || byte(i) == 0x7F {
                    return .failure(Malformed("a control character in a header value"))
                }
                let field = HTTP1AnswerHead.Field(name: start..<colon, value: valueStart..<valueEnd, line: start..<(lf + 1))
                fields.append(field)
                start = lf + 1
                // The few names that frame the body or say what becomes of the connection.
                let nameLength = colon - field.name.lowerBound
                func named(_ lowercased: StaticString) -> Bool {
                    nameLength == lowercased.utf8CodeUnitCount
                        && (0..<nameLength).allSatisfy { HTTP1AnswerHead.lower(byte(field.name.lowerBound + $0)) == lowercased.utf8Start[$0] }
                }
                if named("content-length") {
                    guard valueStart < valueEnd, valueEnd - valueStart <= 18, (valueStart..<valueEnd).allSatisfy(isDigit) else {
                        return .failure(Malformed("a Content-Length that is not a number"))
                    }
                    let value = (valueStart..<valueEnd).reduce(0) { $0 * 10 + Int(byte($1) - 48) }
                    if let length, length != value { return .failure(Malformed("two different Content-Lengths")) }
                    length = value
                } else if named("transfer-encoding") || named("connection") {
                    // Comma-separated tokens, each compared as a token is.
                    let isEncoding = nameLength == 17
                    var tokenStart = valueStart
                    for i in valueStart...valueEnd where i == valueEnd || byte(i) == UInt8(ascii: ",") {
                        var a = tokenStart
                        var b = i
                        while a < b && (byte(a) == 0x20 || byte(a) == 0x09) { a += 1 }
                        while b > a && (byte(b - 1) == 0x20 || byte(b - 1) == 0x09) { b -= 1 }
                        tokenStart = i + 1
                        guard a < b else { continue }
                        func token(_ lowercased: StaticString) -> Bool {
                            b - a == lowercased.utf8CodeUnitCount && (0..<(b - a)).allSatisfy { HTTP1AnswerHead.lower(byte(a + $0)) == lowercased.utf8Start[$0] }
                        }
                        if isEncoding {
                            chunkedLast = token("chunked")
                            if chunkedLast == false { otherCoding = true }
                        } else if token("close") {
                            close = true
                        } else if token("keep-alive") {
                            keepAliveToken = true
                        } else {
                            connectionNames.append(a..<b)
                        }
                    }
                }
            }
            // RFC 9112 §6.3: no body for these whatever the head says; a Transfer-Encoding beside a
            // Content-Length is how answers are smuggled, so it is refused rather than chosen between.
            let framing: HTTP1AnswerHead.Framing
            if answersHEAD || status < 200 || status == 204 || status == 304 {
                framing = .none
            } else if let chunkedLast {
                if length != nil { return .failure(Malformed("a Transfer-Encoding beside a Content-Length")) }
                // The body is passed on unframed, and the transfer coding's name does not go with it:
                // a coding other than chunked (gzip, say) would reach the client unnamed.
                if otherCoding { return .failure(Malformed("a transfer coding other than chunked")) }
                framing = chunkedLast ? .chunked : .untilClose
            } else if let length {
                framing = .length(length)
            } else {
                framing = .untilClose
            }
            // HTTP/1.0 closes unless it says otherwise; HTTP/1.1 keeps the connection unless it says `close`.
            // A transfer coding in an HTTP/1.0 answer is not to be trusted to frame it: read it, then
            // close (RFC 9112 §6.1).
            let keepAlive = (minor == 0 ? keepAliveToken && chunkedLast == nil : true) && !close && framing != .untilClose
            return .success(
                HTTP1AnswerHead(
                    bytes: head, statusCode: status, statusLineRest: 9..<(statusEnd + 1), framing: framing, keepAlive: keepAlive,
                    fields: fields, connectionNames: connectionNames))
        }
        return try parsed.get()
    }
}
