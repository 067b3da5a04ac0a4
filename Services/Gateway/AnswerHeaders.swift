import NIOHTTP1
import ServiceKitHTTP

/// The headers of an upstream's answer that go on to the client, made from its head as read off the
/// wire (`HTTP1AnswerHead`): all but the hop-by-hop ones, those its `Connection` header names and
/// those named in `added`; then `added`. The answer goes out through NIO's HTTP/1 encoder, which
/// frames it for the client (chunks for a body without a length, none for the answer to a HEAD) and
/// keeps each answer matched to its request.
enum AnswerHeaders {
    static func forClient(_ head: HTTP1AnswerHead, adding added: [(String, String)]) -> HTTPHeaders {
        var kept: [(String, String)] = []
        kept.reserveCapacity(head.fields.count + added.count)
        var length = false
        for field in head.fields {
            if let known = KnownHeader.of(field, in: head) {
                if known.hopByHop { continue }
                // The reader took repeated equal lengths as one; a client's parser may refuse two.
                if known.name == "content-length" {
                    if length { continue }
                    length = true
                }
            }
            if !head.connectionNames.isEmpty && head.isNamedByConnection(field) { continue }
            if added.contains(where: { head.field(field, isNamed: $0.0) }) { continue }
            kept.append((head.string(field.name), head.string(field.value)))
        }
        kept.append(contentsOf: added)
        return HTTPHeaders(kept)
    }
}
