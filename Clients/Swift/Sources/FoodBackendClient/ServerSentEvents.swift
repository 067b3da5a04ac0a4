/// The server-sent events format (WHATWG HTML, "Interpreting an event stream"), fed bytes as they
/// arrive. An event is given out only when its blank line has arrived, so a connection cut in the
/// middle of one leaves nothing half-read behind, and the last id is that of a whole event.
///
/// mattt/EventSource's parser would do this, but its package does not build on Linux (it calls
/// `URLSession.bytes`, which swift-corelibs-foundation lacks), and one parser tested here is
/// better than one for Apple's platforms that no test runs.
struct ServerSentEventParser {
    struct Event: Equatable {
        var id: String?
        var event: String?
        var data: String
    }

    private var line: [UInt8] = []
    private var sawCR = false
    private var eventType: String?
    private var data: [String] = []
    private var id: String?
    private var hasData = false
    private var isFirstLine = true
    /// The last `retry:` in milliseconds, if any.
    private(set) var retry: Int?
    private(set) var lastEventID: String?
    private var ready: [Event] = []

    mutating func consume<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        for byte in bytes {
            switch byte {
            case 0x0A where sawCR:
                sawCR = false
            case 0x0A:
                endLine()
            case 0x0D:
                endLine()
                sawCR = true
            default:
                sawCR = false
                line.append(byte)
            }
        }
    }

    mutating func next() -> Event? {
        ready.isEmpty ? nil : ready.removeFirst()
    }

    private mutating func endLine() {
        var bytes = line[...]
        line.removeAll(keepingCapacity: true)
        if isFirstLine {
            isFirstLine = false
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        }
        guard !bytes.isEmpty else { return dispatch() }
        if bytes.first == UInt8(ascii: ":") { return }
        let field: String
        var value: String
        if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
            field = String(decoding: bytes[..<colon], as: UTF8.self)
            var rest = bytes[(colon + 1)...]
            if rest.first == UInt8(ascii: " ") { rest = rest.dropFirst() }
            value = String(decoding: rest, as: UTF8.self)
        } else {
            field = String(decoding: bytes, as: UTF8.self)
            value = ""
        }
        switch field {
        case "event": eventType = value
        case "data":
            data.append(value)
            hasData = true
        case "id" where !value.utf8.contains(0): id = value
        case "retry":
            if let milliseconds = Int(value), milliseconds >= 0 { retry = milliseconds }
        default: break
        }
        value = ""
    }

    private mutating func dispatch() {
        if let id { lastEventID = id }
        defer {
            eventType = nil
            data = []
            hasData = false
            id = nil
        }
        // An event without data is not dispatched (the spec's rule); its id still counts.
        guard hasData else { return }
        ready.append(Event(id: id ?? lastEventID, event: eventType, data: data.joined(separator: "\n")))
    }
}
