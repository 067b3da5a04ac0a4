import NIOCore
import ServiceKitHTTP
import Testing

/// `HTTP1AnswerReader` reads answers as RFC 9112 frames them, whatever way the bytes are split on
/// arrival, and refuses what is not a well-formed answer.
@Suite struct HTTP1AnswerReaderTests {
    /// Every part of the answers in `wire`, read with the bytes split at every `step`.
    static func read(_ wire: String, toHEAD: Bool = false, answers: Int = 1, step: Int? = nil, closeAtEnd: Bool = false) throws -> [Read] {
        var reader = HTTP1AnswerReader()
        reader.expectAnswer(toHEAD: toHEAD)
        var reads: [Read] = []
        var body = ""
        func take(_ part: HTTP1AnswerReader.Part) {
            switch part {
            case .head(let head): reads.append(.head(head))
            case .body(let bytes): body += String(buffer: bytes)
            case .end:
                reads.append(.body(body))
                body = ""
                if reads.count / 2 < answers { reader.expectAnswer(toHEAD: toHEAD) }
            }
        }
        let all = Array(wire.utf8)
        let size = step ?? all.count
        for start in stride(from: 0, to: all.count, by: size) {
            var bytes = ByteBuffer(bytes: all[start..<min(start + size, all.count)])
            while let part = try reader.next(&bytes) { take(part) }
        }
        if closeAtEnd, let part = try reader.closed() { take(part) }
        // An end that is due comes without further bytes.
        var none = ByteBuffer()
        while let part = try reader.next(&none) { take(part) }
        return reads
    }

    enum Read {
        case head(HTTP1AnswerHead)
        case body(String)
        var head: HTTP1AnswerHead? { if case .head(let head) = self { head } else { nil } }
        var body: String? { if case .body(let body) = self { body } else { nil } }
    }

    static let splits = [nil, 1, 2, 3, 7]

    @Test(arguments: splits) func aLengthFramedAnswerAndItsLines(step: Int?) throws {
        let wire = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 7\r\nX-Thing:  spaced value \t\r\n\r\n{\"a\":1}"
        let reads = try Self.read(wire, step: step)
        #expect(reads.count == 2)
        let head = try #require(reads[0].head)
        #expect(head.statusCode == 201)
        #expect(head.status == .created)
        #expect(head.framing == .length(7))
        #expect(head.keepAlive)
        #expect(head.fields.map { head.string($0.name) } == ["Content-Type", "Content-Length", "X-Thing"])
        #expect(head.value(named: "x-thing") == "spaced value")
        #expect(head.string(head.fields[1].line) == "Content-Length: 7\r\n")
        #expect(head.string(head.statusLineRest) == "201 Created\r\n")
        #expect(reads[1].body == "{\"a\":1}")
    }

    @Test(arguments: splits) func aChunkedAnswerIsUnframedAndItsTrailersDropped(step: Int?) throws {
        let wire = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n19\r\n, abcdefghijklmnopqrstuvw\r\n0\r\nX-Trailer: t\r\n\r\n"
        let reads = try Self.read(wire, step: step)
        #expect(reads[0].head?.framing == .chunked)
        #expect(reads[0].head?.keepAlive == true)
        #expect(reads[1].body == "hello, abcdefghijklmnopqrstuvw")
    }

    @Test(arguments: splits) func answersOneAfterAnotherAndInterimOnesSkipped(step: Int?) throws {
        let wire = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n"
        let reads = try Self.read(wire, answers: 2, step: step)
        #expect(reads.compactMap(\.head).map(\.statusCode) == [200, 204])
        #expect(reads.compactMap(\.body) == ["ok", ""])
    }

    @Test func noBodyForAHEADWhateverTheHeadSays() throws {
        let reads = try Self.read("HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", toHEAD: true)
        #expect(reads[0].head?.framing == HTTP1AnswerHead.Framing.none)
        #expect(reads[1].body == "")
    }

    @Test(arguments: splits) func anAnswerWithoutFramingEndsWithItsConnection(step: Int?) throws {
        let reads = try Self.read("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it", step: step, closeAtEnd: true)
        #expect(reads[0].head?.framing == .untilClose)
        #expect(reads[0].head?.keepAlive == false)
        #expect(reads[1].body == "all of it")
    }

    @Test func whatKeepsTheConnectionAndWhatTheConnectionHeaderNames() throws {
        let http10 = try #require(try Self.read("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")[0].head)
        #expect(!http10.keepAlive)
        let http10Kept = try #require(try Self.read("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n")[0].head)
        #expect(http10Kept.keepAlive)
        let http10Chunked = try #require(try Self.read("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")[0].head)
        #expect(!http10Chunked.keepAlive)
        let closing = try #require(try Self.read("HTTP/1.1 200 OK\r\nconnection: x-private, CLOSE\r\nX-Private: 1\r\nX-Public: 2\r\nContent-Length: 0\r\n\r\n")[0].head)
        #expect(!closing.keepAlive)
        #expect(closing.fields.filter(closing.isNamedByConnection).map { closing.string($0.name) } == ["X-Private"])
    }

    @Test(arguments: [
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 099 Early\r\n\r\n",
        "HTTP/1.1 200 OK\r\nNo-Colon\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\u{1}b\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
        "HTTP/1.1 101 Switching Protocols\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab",
    ])
    func whatIsNotAnAnswerIsRefused(wire: String) {
        #expect(throws: HTTP1AnswerReader.Malformed.self) { try Self.read(wire, step: 1) }
    }

    @Test func anAnswerBrokenOffByTheCloseIsAnError() throws {
        var reader = HTTP1AnswerReader()
        reader.expectAnswer(toHEAD: false)
        var bytes = ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        while try reader.next(&bytes) != nil {}
        #expect(throws: HTTP1AnswerReader.Malformed.self) { try reader.closed() }
    }

    @Test func anEndlessHeadIsRefused() throws {
        var reader = HTTP1AnswerReader()
        reader.expectAnswer(toHEAD: false)
        var first = ByteBuffer(string: "HTTP/1.1 200 OK\r\n")
        #expect(try reader.next(&first) == nil)
        let line = ByteBuffer(string: "X-Filler: " + String(repeating: "a", count: 1000) + "\r\n")
        #expect(throws: HTTP1AnswerReader.Malformed.self) {
            for _ in 0..<100 {
                var more = line
                _ = try reader.next(&more)
            }
        }
    }
}
