import NIOCore
import ServiceKitHTTP

/// Writes the answers `ProxyChannelHandler` gives as the bytes that go on the wire: an upstream's
/// head with the lines it keeps copied as they came, or the gateway's own. Building NIO's header
/// lists to have its encoder write them again was most of what an answer cost the gateway.
enum AnswerWriter {
    /// An upstream's head for the client: its status, its lines less the hop-by-hop ones, those its
    /// `Connection` header names and those named in `added`, then `added`; and, for a body that goes
    /// on in chunks, the framing that says so.
    static func head(_ head: HTTP1AnswerHead, adding added: [(String, String)], chunked: Bool, into out: inout ByteBuffer) {
        out.writeStaticString("HTTP/1.1 ")
        head.bytes.withUnsafeReadableBytes { bytes in
            out.writeBytes(UnsafeRawBufferPointer(rebasing: bytes[head.statusLineRest]))
            for field in head.fields {
                if let known = KnownHeader.of(field, in: head), known.hopByHop { continue }
                if !head.connectionNames.isEmpty && head.isNamedByConnection(field) { continue }
                if added.contains(where: { head.field(field, isNamed: $0.0) }) { continue }
                out.writeBytes(UnsafeRawBufferPointer(rebasing: bytes[field.line]))
            }
        }
        for (name, value) in added { line(name, value, into: &out) }
        if chunked { out.writeStaticString("Transfer-Encoding: chunked\r\n") }
        out.writeStaticString("\r\n")
    }

    /// The gateway's own head.
    static func head(status: Int, reason: String, fields: [(String, String)], into out: inout ByteBuffer) {
        out.writeStaticString("HTTP/1.1 ")
        out.writeString(String(status))
        out.writeStaticString(" ")
        out.writeString(reason)
        out.writeStaticString("\r\n")
        for (name, value) in fields { line(name, value, into: &out) }
        out.writeStaticString("\r\n")
    }

    /// A chunk of a chunked body (RFC 9112 §7.1): an answer's to the client, or an upload's to the upstream.
    static func chunk(_ data: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer {
        var out = allocator.buffer(capacity: data.readableBytes + 20)
        out.writeString(String(data.readableBytes, radix: 16))
        out.writeStaticString("\r\n")
        out.writeImmutableBuffer(data)
        out.writeStaticString("\r\n")
        return out
    }

    /// The end of a chunked body, without trailers.
    static let lastChunk = ByteBuffer(string: "0\r\n\r\n")

    private static func line(_ name: String, _ value: String, into out: inout ByteBuffer) {
        out.writeString(name)
        out.writeStaticString(": ")
        out.writeString(value)
        out.writeStaticString("\r\n")
    }
}
