import NIOCore
import ServiceKitHTTP
import Testing

/// The multipart reader on its own: parts found by their boundary however the bytes around it fall.
@Suite struct MultipartFormTests {
    static func body(_ parts: [(name: String, content: [UInt8])], boundary: String) -> [UInt8] {
        var bytes: [UInt8] = []
        for part in parts {
            bytes += Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(part.name)\"\r\n\r\n".utf8)
            bytes += part.content
            bytes += Array("\r\n".utf8)
        }
        return bytes + Array("--\(boundary)--\r\n".utf8)
    }

    @Test func partsAreFoundWhateverTheirContentHolds() throws {
        // Content full of near misses: carriage returns, a new line and dashes, the boundary less its
        // last byte, and the boundary's first byte as the content's last.
        let boundary = "b0und4ry"
        let tricky = Array("\r\r\n-\r\n--b0und4r\r\n--b0und4\r\n-".utf8) + (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) } + [13]
        let bytes = Self.body([("photo", tricky), ("hint", Array("no dressing".utf8)), ("empty", [])], boundary: boundary)
        let form = try MultipartForm(ByteBuffer(bytes: bytes), boundary: boundary)
        #expect(form.parts.map(\.name) == ["photo", "hint", "empty"])
        #expect(Array(buffer: try #require(form.first("photo")).body) == tricky)
        #expect(form.text("hint") == "no dressing")
        #expect(form.first("empty")?.body.readableBytes == 0)
    }

    @Test func aBodyReadFromTheMiddleOfABufferIsReadFromItsReaderIndex() throws {
        let bytes = Self.body([("photo", Array("--b\r\n".utf8) + [1, 2, 3])], boundary: "b")
        var buffer = ByteBuffer(string: "--b\r\nnot this part")
        buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
        buffer.writeBytes(bytes)
        let form = try MultipartForm(buffer, boundary: "b")
        #expect(form.parts.count == 1 && Array(buffer: form.parts[0].body) == Array("--b\r\n".utf8) + [1, 2, 3])
    }

    /// A byte of 0x80 or more in a header is read as text (vapor/multipart-kit 4.7.1 traps on it).
    @Test func aHeaderWithBytesOutsideASCIIIsReadNotTrappedOn() throws {
        let text = "--b\r\n\u{80}\u{E9}: x\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"caf\u{E9}.jpg\"\r\n\r\nx\r\n--b--\r\n"
        let form = try MultipartForm(ByteBuffer(bytes: Array(text.utf8) + [0xFF]), boundary: "b")
        #expect(form.parts.map(\.name) == ["photo"] && form.first("photo")?.filename == "caf\u{E9}.jpg")
    }

    @Test(arguments: [
        "", "--b", "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end", "--b\r\nno headers end", "nothing like it",
        "--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--",
        // Cut short after a delimiter, or a delimiter that is neither another part nor the end.
        "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--b\r\n",
        "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--b\r",
        "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--b\r\nContent-Disposition: form-data; name=\"hint\"",
        "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--b-garbage",
    ])
    func aBrokenBodyIsRefused(_ text: String) {
        #expect(throws: MultipartForm.Problem.self) { try MultipartForm(ByteBuffer(string: text), boundary: "b") }
    }
}
