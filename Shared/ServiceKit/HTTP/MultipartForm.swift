#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore

/// A `multipart/form-data` body (RFC 7578) read whole: its parts by field name. Only what the
/// upload routes need: `Content-Disposition`'s `name` and `filename`, each part's `Content-Type`,
/// and the bytes between boundaries, which stay in the request's buffer (no copy of a photo).
///
/// The project's own because the maintained parser at hand is not safe to expose: vapor/multipart-kit
/// 4.7.1 looks each header-name byte up in a table of 128 entries, so one byte of 0x80 or more in a
/// part's header traps, and a signed-in user could stop the process with one upload (its 5.x parser
/// is still a beta). `MultipartFormTests` sends such a body.
public struct MultipartForm: Sendable {
    public struct Part: Sendable {
        public var name: String
        public var filename: String?
        public var contentType: String?
        public var body: ByteBuffer
    }

    public var parts: [Part]

    public func first(_ name: String) -> Part? { parts.first { $0.name == name } }

    public func text(_ name: String) -> String? { first(name).map { String(buffer: $0.body) } }

    public enum Problem: Error { case malformed(String) }

    /// The boundary of a `multipart/form-data` content type; nil for any other type.
    public static func boundary(of contentType: String) -> String? {
        let pieces = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let type = pieces.first, type.lowercased() == "multipart/form-data" else { return nil }
        for piece in pieces.dropFirst() {
            let pair = piece.split(separator: "=", maxSplits: 1).map(String.init)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "boundary" else { continue }
            var value = pair[1].trimmingCharacters(in: .whitespaces)
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = String(value.dropFirst().dropLast()) }
            // RFC 2046: 1 to 70 characters.
            return (1...70).contains(value.utf8.count) ? value : nil
        }
        return nil
    }

    public init(_ body: ByteBuffer, boundary: String) throws(Problem) {
        let bytes = body.readableBytesView
        let delimiter = Array("--\(boundary)".utf8)
        var parts: [Part] = []
        guard var position = Self.find(delimiter, in: bytes, from: bytes.startIndex) else { throw .malformed("no boundary") }
        position += delimiter.count
        while true {
            // "--" after a delimiter ends the body.
            if bytes.distance(from: position, to: bytes.endIndex) >= 2, bytes[position] == UInt8(ascii: "-"), bytes[position + 1] == UInt8(ascii: "-") { break }
            guard let headerStart = Self.find([13, 10], in: bytes, from: position) else { throw .malformed("a part does not start on a new line") }
            let headersFrom = headerStart + 2
            guard let headersEnd = Self.find([13, 10, 13, 10], in: bytes, from: headersFrom) else { throw .malformed("a part's headers do not end") }
            let headerText = String(decoding: bytes[headersFrom..<headersEnd], as: UTF8.self)
            let contentFrom = headersEnd + 4
            guard let next = Self.find([13, 10] + delimiter, in: bytes, from: contentFrom) else { throw .malformed("a part does not end with the boundary") }
            var name: String?
            var filename: String?
            var contentType: String?
            for line in headerText.split(separator: "\r\n") {
                let pair = line.split(separator: ":", maxSplits: 1)
                guard pair.count == 2 else { continue }
                let field = pair[0].trimmingCharacters(in: .whitespaces).lowercased()
                let value = pair[1].trimmingCharacters(in: .whitespaces)
                if field == "content-type" { contentType = value }
                if field == "content-disposition" {
                    name = Self.parameter("name", in: value)
                    filename = Self.parameter("filename", in: value)
                }
            }
            guard let name else { throw .malformed("a part has no name") }
            var content = body
            content.moveReaderIndex(to: body.readerIndex + bytes.distance(from: bytes.startIndex, to: contentFrom))
            content.moveWriterIndex(to: body.readerIndex + bytes.distance(from: bytes.startIndex, to: next))
            parts.append(Part(name: name, filename: filename, contentType: contentType, body: content))
            position = next + 2 + delimiter.count
            guard parts.count <= 20 else { throw .malformed("more than 20 parts") }
        }
        self.parts = parts
    }

    private static func parameter(_ key: String, in value: String) -> String? {
        for piece in value.split(separator: ";").dropFirst() {
            let pair = piece.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, pair[0].lowercased() == key else { continue }
            var text = pair[1]
            if text.hasPrefix("\""), text.hasSuffix("\""), text.count >= 2 { text = String(text.dropFirst().dropLast()) }
            return text
        }
        return nil
    }

    /// Where `needle` first occurs at or after `start`. A photo upload is searched end to end for its
    /// boundary: C's `memchr` finds each candidate first byte with vector instructions and `memcmp`
    /// checks the rest, where a byte-by-byte search in Swift was a noticeable share of an analysis.
    private static func find(_ needle: [UInt8], in haystack: ByteBufferView, from start: ByteBufferView.Index) -> ByteBufferView.Index? {
        guard let first = needle.first, start >= haystack.startIndex, haystack.distance(from: start, to: haystack.endIndex) >= needle.count else { return nil }
        let offset = haystack.withContiguousStorageIfAvailable { bytes in
            needle.withUnsafeBytes { needleBytes -> Int? in
                guard let base = UnsafeRawPointer(bytes.baseAddress), let wanted = needleBytes.baseAddress else { return nil }
                var from = haystack.distance(from: haystack.startIndex, to: start)
                let last = bytes.count - needle.count
                while from <= last {
                    guard let hit = memchr(base + from, Int32(first), last - from + 1) else { return nil }
                    let at = base.distance(to: UnsafeRawPointer(hit))
                    if memcmp(hit, wanted, needle.count) == 0 { return at }
                    from = at + 1
                }
                return nil
            }
        }
        return offset.flatMap { $0.map { haystack.index(haystack.startIndex, offsetBy: $0) } }
    }
}
