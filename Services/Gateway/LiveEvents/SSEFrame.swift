import Foundation
import NIOCore
import ServiceKit

/// The text of an event stream, in the server-sent events format (WHATWG HTML §9.2): fields of one
/// line each, a blank line after each message, a line starting with `:` a comment.
enum SSEFrame {
    /// How long the client waits before reconnecting, in milliseconds.
    static func retry(_ delay: Duration) -> ByteBuffer {
        ByteBuffer(string: "retry: \(delay.components.seconds * 1_000 + delay.components.attoseconds / 1_000_000_000_000_000)\n\n")
    }

    /// The heartbeat: a comment, which clients ignore.
    static let ping = ByteBuffer(string: ": ping\n\n")

    static func event(id: StreamID, name: String, data: String) -> ByteBuffer {
        ByteBuffer(string: "id: \(id)\nevent: \(name)\ndata: \(data)\n\n")
    }

    /// Missed events are gone: the client reloads what it shows. The id is where the stream now
    /// stands, so that a reconnection goes on from there instead of asking for the lost ones again.
    static func reset(at id: StreamID) -> ByteBuffer {
        ByteBuffer(string: "id: \(id)\nevent: \(LiveEventNames.reset)\ndata: {}\n\n")
    }

    /// The account's newer streams took this one's place: it ends, and the client connects again
    /// when the app is next in use, not at once. No id: the client's last one still stands.
    static let replaced = ByteBuffer(string: "event: \(LiveEventNames.replaced)\ndata: {}\n\n")

    /// `data` of an event: the envelope's payload as the envelope has it (snake_case), with the
    /// envelope's `occurred_at`; on one line, as JSON text always can be.
    static func data(ofEnvelope json: String) -> String? {
        guard case .object(let envelope)? = try? JSONDecoder.api.decode(JSONValue.self, from: Data(json.utf8)),
            case .object(var data)? = envelope["data"]
        else { return nil }
        data["occurred_at"] = envelope["occurred_at"]
        guard let bytes = try? APIJSON.encode(JSONValue.object(data)) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The frame of a live entry for a client, or nil for an entry clients do not receive.
    static func of(id: StreamID, type: String, envelope: String) -> ByteBuffer? {
        guard let name = LiveEventNames.byType[type], let data = data(ofEnvelope: envelope) else { return nil }
        return event(id: id, name: name, data: data)
    }
}
